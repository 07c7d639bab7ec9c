"""Accuracy reports: what the speed layer said versus what the batch layer computed, like for like.

For one ingest window [previous cutoff, cutoff) — the records a batch run absorbed — every cell
(view, granularity, key, event bucket, ingest bucket) is compared:

- speed: the realtime row the speed layer holds in Cassandra (for distinct views the estimate of
  its HyperLogLog sketch);
- batch: the exact value of the same cell recomputed with Spark from the master dataset, from the
  records ingested in the window that are the first copy of their event_id over the WHOLE master
  dataset (the batch layer's de-duplication), bucketed by ingest bucket as the speed layer does.

Every difference is traced to a cause (docs/reports.md):

  duplicates_beyond_window  copies of an event that arrived more than speed.dedupe_window_s after
                            the last copy the speed layer counted: the speed layer counts them
                            again, the batch does not. Counted per cell with Spark.
  accepted_by_one_layer     a cell one layer has and the other has not, duplicates aside.
  sketch_approximation      distinct views: the sketch's error, within SKETCH_TOLERANCE × the
                            HLL bound 1.04 / sqrt(2^lg_k).
  late_events               what is left in cells holding late events (event time more than an
                            hour before ingest time). The speed layer keys by ingest bucket, so
                            lateness must cause no error: this is a measured figure, expected 0.
  unexplained               anything else.

Entry points: `build_report` (dict), `store_report` (JSON + HTML, local and HDFS), `latest_reports`,
and `python -m batch_layer.accuracy` for the serving version.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from definitions.events import FIELD_NAMES
from definitions.logs import configure_from
from definitions.settings import Settings
from definitions.views import GRANULARITIES, HLL_LG_K, View, key_text, load_views
from stores.kafka import offsets_at

log = logging.getLogger("lambda.accuracy")

HLL_BOUND = 1.04 / math.sqrt(2**HLL_LG_K)  # relative standard error of a sketch: 1.625 % at lg_k = 12
SKETCH_TOLERANCE = 3.0  # a distinct cell's error within this many bounds is the sketch's own
LATE_AFTER_S = 3_600  # an event is late when its event time is more than this before its ingest time
CAUSES = ("duplicates_beyond_window", "accepted_by_one_layer", "sketch_approximation", "late_events", "unexplained")
HDFS_DIR = "/lambda/reports"
MAX_DIFFERENCES = 2_000  # differing cells listed per view
MAX_SCATTER = 1_500
TTL_MARGIN_S = 3_600  # ingest buckets this close to the realtime rows' TTL are not compared

KeyFilter = Callable[[View, tuple[str, ...]], bool]
CellId = tuple[str, str, str, int, int]  # view, granularity, key text, event bucket, ingest bucket


# --- the speed side -------------------------------------------------------------------------------


@dataclass
class RealtimeSnapshot:
    """Realtime cells read from Cassandra: {cell: value}, for ingest buckets in [start_ms, end_ms)."""

    start_ms: int
    end_ms: int | None
    read_ms: int
    cells: dict[CellId, float] = field(default_factory=dict)
    rows: int = 0
    unreadable: list = field(default_factory=list)  # token_scan.Unreadable: ranges whose rows are missing


def read_realtime(
    settings: Settings, start_ms: int, end_ms: int | None = None, views: Iterable[View] | None = None
) -> RealtimeSnapshot:
    """Every realtime row of the declared views whose ingest bucket is in [start_ms, end_ms).

    A filtered scan of both realtime tables (ALLOW FILTERING on ingest_bucket), token range by
    token range: a range that cannot be read is recorded in `unreadable`, not fatal.
    Distinct views: the sketch's estimate.
    """
    from datasketches import hll_sketch

    from stores.clients import cassandra_cluster
    from stores.realtime import BY_BUCKET, BY_KEY
    from stores.realtime_scan import scan

    registry = {v.name: v for v in (views if views is not None else load_views(settings))}
    snapshot = RealtimeSnapshot(start_ms, end_ms, int(time.time() * 1000))
    bounds = "ingest_bucket >= ?" + (" AND ingest_bucket < ?" if end_ms is not None else "")
    params = (start_ms // 1000,) + ((end_ms // 1000,) if end_ms is not None else ())
    cluster = cassandra_cluster(settings, timeout_s=120)
    try:
        session = cluster.connect(settings.cassandra.keyspace)
        tables = (
            (
                BY_KEY,
                ("view_name", "granularity", "key"),
                "view_name, granularity, key, event_bucket, ingest_bucket, value, sketch",
            ),
            (
                BY_BUCKET,
                ("view_name", "granularity", "event_bucket"),
                "view_name, granularity, key, event_bucket, ingest_bucket, value",
            ),
        )
        for table, partition_key, columns in tables:
            for rows in scan(session, table, partition_key, columns, bounds, params, unreadable=snapshot.unreadable):
                for row in rows:
                    view = registry.get(row.view_name)
                    if view is None or (view.layout == "by_bucket") != (table == BY_BUCKET):
                        continue
                    value = float(row.value or 0)
                    sketch = getattr(row, "sketch", None)
                    if view.aggregation == "distinct" and sketch is not None:
                        value = hll_sketch.deserialize(bytes(sketch)).get_estimate()
                    snapshot.cells[(row.view_name, row.granularity, row.key, row.event_bucket, row.ingest_bucket)] = (
                        value
                    )
                    snapshot.rows += 1
    finally:
        cluster.shutdown()
    return snapshot


def speed_layer_position(settings: Settings) -> dict[int, int] | None:
    """Per partition of topic `events`, the next offset after the speed layer's last committed
    micro-batch (read from its checkpoint on HDFS); None before its first commit. A committed
    micro-batch has written its realtime rows (foreachBatch runs before the commit)."""
    from stores.webhdfs import WebHdfs

    root = settings.speed.checkpoint_dir.rstrip("/")
    with WebHdfs(settings) as fs:
        commits = [int(name) for name in fs.list(f"{root}/commits") if name.isdigit()]
        if not commits:
            return None
        raw = fs.read(f"{root}/offsets/{max(commits)}")
    if raw is None:
        return None
    for line in raw.decode().splitlines()[2:]:  # "v1", the batch metadata, then one line per source
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and settings.kafka.events_topic in doc:
            return {int(p): int(o) for p, o in doc[settings.kafka.events_topic].items()}
    return None


def wait_for_speed_layer(settings: Settings, ingest_ms: int, timeout_s: float = 180.0) -> dict:
    """Wait until the speed layer has committed every record ingested before `ingest_ms`."""
    needed = offsets_at(settings, ingest_ms)
    started = time.monotonic()
    committed = None
    while True:
        committed = speed_layer_position(settings)
        done = committed is not None and all(committed.get(p, -1) >= off for p, off in needed.items())
        if done or time.monotonic() - started >= timeout_s:
            return {
                "caught_up": bool(done),
                "waited_s": round(time.monotonic() - started, 1),
                "needed_offsets": {str(k): v for k, v in needed.items()},
                "committed_offsets": {str(k): v for k, v in (committed or {}).items()},
            }
        time.sleep(2)


# --- the batch side -------------------------------------------------------------------------------


@dataclass
class BatchCell:
    batch: float = 0.0  # the batch layer's exact value (first copies only)
    expected: float = 0.0  # the exact value of what the speed layer counts: first copies + copies beyond the window
    first_records: int = 0
    recounts: int = 0  # copies beyond the de-duplication window in the cell
    dropped: int = 0  # copies within the window (both layers drop them)
    late_records: int = 0


def batch_cells(
    settings: Settings, spark, views: list[View], start_ms: int, end_ms: int
) -> tuple[dict[CellId, BatchCell], dict]:
    """Exact cells of the window from the master dataset, with Spark; and figures about its records."""
    from pyspark.sql import functions as F

    from stores.master import read_master

    bucket_s = settings.ingest_bucket_s
    window_us = settings.speed.dedupe_window_s * 1_000_000
    start_ts, end_ts = F.timestamp_millis(F.lit(start_ms)), F.timestamp_millis(F.lit(end_ms))
    master = read_master(spark, settings)
    before_end = master.where((F.col("ingest_date") <= F.lit(_date(end_ms))) & (F.col("ingest_time") < end_ts))
    in_window = before_end.where((F.col("ingest_date") >= F.lit(_date(start_ms))) & (F.col("ingest_time") >= start_ts))

    # Every copy (before the window's end) of the events ingested in the window, as one sorted chain
    # per event_id — the batch's order: ingest time, partition, offset. Folding the chain marks each
    # later copy: `recount` when it arrived more than the de-duplication window after the last copy
    # the speed layer counted (the first, or the last recount), else dropped by both layers.
    ids = in_window.select("event_id").distinct()
    copies = before_end.select("event_id", "ingest_time", "kafka_partition", "kafka_offset").join(
        ids, "event_id", "left_semi"
    )
    chains = (
        copies.groupBy("event_id")
        .agg(
            F.array_sort(
                F.collect_list(
                    F.struct(
                        F.unix_micros("ingest_time").alias("t"),
                        F.col("kafka_partition").alias("p"),
                        F.col("kafka_offset").alias("o"),
                    )
                )
            ).alias("c")
        )
        .where(F.size("c") > 1)
    )
    marked_type = "array<struct<p:int,o:bigint,gap_us:bigint,recount:boolean>>"

    def step(acc, x):
        gap = x["t"] - acc["ref"]
        beyond = gap > F.lit(window_us)
        mark = F.struct(x["p"].alias("p"), x["o"].alias("o"), gap.alias("gap_us"), beyond.alias("recount"))
        return F.struct(
            F.when(beyond, x["t"]).otherwise(acc["ref"]).alias("ref"), F.concat(acc["out"], F.array(mark)).alias("out")
        )

    start = F.struct(F.col("c")[0]["t"].alias("ref"), F.array().cast(marked_type).alias("out"))
    later = chains.select(
        F.explode(F.aggregate(F.slice("c", 2, F.size("c") - 1), start, step)["out"]).alias("x")
    ).select(F.col("x.p").alias("kafka_partition"), F.col("x.o").alias("kafka_offset"), "x.gap_us", "x.recount")
    tagged = (
        in_window.join(later, ["kafka_partition", "kafka_offset"], "left")
        .withColumn(
            "status", F.when(F.col("recount").isNull(), "first").when(F.col("recount"), "recount").otherwise("dropped")
        )
        .withColumn(
            "late", (F.unix_micros("ingest_time") - F.unix_micros("event_time")) > F.lit(LATE_AFTER_S * 1_000_000)
        )
        .withColumn("ingest_bucket", (F.floor(F.unix_seconds("ingest_time") / bucket_s) * bucket_s).cast("bigint"))
        .select(*FIELD_NAMES, "ingest_time", "ingest_bucket", "status", "late", "gap_us")
        .cache()
    )
    began = time.monotonic()
    try:
        figures: dict[str, Any] = {
            "master_records_in_window": 0,
            "first_copies": 0,
            "duplicate_copies_within_window": 0,
            "duplicate_copies_beyond_window": 0,
            "late_records": 0,
            "beyond_window_gap_s": {"min": None, "max": None},
        }
        names = {
            "first": "first_copies",
            "dropped": "duplicate_copies_within_window",
            "recount": "duplicate_copies_beyond_window",
        }
        for row in (
            tagged.groupBy("status", "late")
            .agg(F.count(F.lit(1)).alias("n"), F.min("gap_us").alias("lo"), F.max("gap_us").alias("hi"))
            .collect()
        ):
            figures["master_records_in_window"] += row.n
            figures[names[row.status]] += row.n
            if row.late and row.status != "dropped":
                figures["late_records"] += row.n
            if row.status == "recount":
                gaps = figures["beyond_window_gap_s"]
                gaps["min"] = min(x for x in (gaps["min"], row.lo / 1e6) if x is not None)
                gaps["max"] = max(x for x in (gaps["max"], row.hi / 1e6) if x is not None)
        log.info("window records tagged in %.1fs: %s", time.monotonic() - began, figures)
        frames = [
            frame
            for view in views
            for granularity in view.granularities
            for frame in _view_parts(view, granularity, tagged)
        ]
        cells: dict[CellId, BatchCell] = {}
        if frames:
            union = frames[0]
            for frame in frames[1:]:
                union = union.unionByName(frame)
            aggregation = {v.name: v.aggregation for v in views}
            for row in union.collect():
                cell_id = (row.view, row.granularity, key_text(row.key), row.event_bucket, row.ingest_bucket)
                cell = cells.setdefault(cell_id, BatchCell())
                _fold(cell, aggregation[row.view], row.part, row.status, row.late, row.value or 0)
        log.info("%d batch cells computed in %.1fs", len(cells), time.monotonic() - began)
    finally:
        tagged.unpersist()
    return cells, figures


def _view_parts(view: View, granularity: str, tagged) -> list:
    """One view at one granularity, keyed by ingest bucket as well, each part derived from the
    view's declaration (View.compute, the batch layer's own derivation), without joins:

    - "count": records per cell, by status (first / recount / dropped) and lateness;
    - "value": for sum views, the sum per cell by status and lateness (count views: the count is the value);
    - "batch" / "expected": for distinct views, the exact distinct count of the first copies, and of
      the first copies with the recounts (what the speed layer's sketch saw).
    """
    from pyspark.sql import functions as F

    def shaped(frame, part: str, by_status: bool = True):
        return frame.select(
            F.lit(view.name).alias("view"),
            F.lit(granularity).alias("granularity"),
            F.array(*[F.col(k).cast("string") for k in view.keys]).alias("key"),
            "event_bucket",
            "ingest_bucket",
            F.lit(part).alias("part"),
            (F.col("status") if by_status else F.lit(None).cast("string")).alias("status"),
            (F.col("late") if by_status else F.lit(None).cast("boolean")).alias("late"),
            F.col("value").cast("double").alias("value"),
        )

    extra = ["ingest_bucket", "status", "late"]
    counter = replace(view, aggregation="count", column=None, layout="by_key")  # the same cells, counting records
    parts = [shaped(counter.compute(tagged, granularity, extra), "count")]
    if view.aggregation == "sum":
        parts.append(shaped(view.compute(tagged, granularity, extra), "value"))
    elif view.aggregation == "distinct":
        status = F.col("status")
        for part, rows in (("batch", tagged.where(status == "first")), ("expected", tagged.where(status != "dropped"))):
            parts.append(
                shaped(view.compute(rows, granularity, ["ingest_bucket"]).drop("sketch"), part, by_status=False)
            )
    return parts


def _fold(cell: BatchCell, aggregation: str, part: str, status: str | None, late: bool | None, value: float) -> None:
    if part == "count":
        n = int(value)
        if status == "first":
            cell.first_records += n
        elif status == "recount":
            cell.recounts += n
        else:
            cell.dropped += n
        if late and status != "dropped":
            cell.late_records += n
    if (part == "count" and aggregation == "count") or part == "value":
        if status == "first":
            cell.batch += value
        if status in ("first", "recount"):
            cell.expected += value
    elif part == "batch":
        cell.batch = value
    elif part == "expected":
        cell.expected = value


# --- comparison and attribution -------------------------------------------------------------------


@dataclass
class Cell:
    view: str
    granularity: str
    key: str
    event_bucket: int
    ingest_bucket: int
    speed: float
    speed_present: bool
    batch: BatchCell
    parts: dict[str, float] = field(default_factory=dict)  # cause -> signed share of speed − batch
    not_recounted: float = 0.0  # copies beyond the window the speed layer still de-duplicated

    @property
    def diff(self) -> float:
        return self.speed - self.batch.batch

    @property
    def batch_present(self) -> bool:
        return self.batch.first_records > 0

    @property
    def expected_present(self) -> bool:
        return self.batch.first_records + self.batch.recounts > 0


def tolerance(exact: float) -> float:
    """How far a sketch estimate of `exact` distinct values may be off and still be the sketch's error."""
    return max(0.5, SKETCH_TOLERANCE * HLL_BOUND * exact)


def significant(amount: float, additive: bool) -> bool:
    return amount != 0 if additive else abs(amount) >= 0.5


def attribute(view: View, cell: Cell) -> None:
    """Split the cell's difference (speed − batch) into causes, in the order of CAUSES."""
    b, e, s = cell.batch.batch, cell.batch.expected, cell.speed
    diff, dup = s - b, e - b
    parts: dict[str, float] = {}
    if view.additive:
        # Copies beyond the window are candidates: the speed layer keeps a counted copy's
        # de-duplication state until its watermark passes it, a little longer than the window, so
        # a candidate may still have been dropped. A difference between 0 and the candidates' total
        # is theirs; whatever the candidates do not account for falls through to the other causes.
        dup_part = diff if dup and min(0, dup) <= diff <= max(0, dup) else dup
    elif dup and abs(s - e) > tolerance(e) and abs(diff) <= tolerance(b):
        dup_part = 0.0  # the sketch agrees with the batch: the candidates were not counted again
    else:
        dup_part = dup
    cell.not_recounted = dup - dup_part
    if dup_part:
        parts["duplicates_beyond_window"] = dup_part
    rest = diff - dup_part
    if rest:
        if significant(rest, view.additive) and cell.speed_present != cell.expected_present:
            parts["accepted_by_one_layer"] = rest
        elif not view.additive and abs(rest) <= tolerance(e if dup_part else b):
            parts["sketch_approximation"] = rest
        elif cell.batch.late_records:
            parts["late_events"] = rest
        else:
            parts["unexplained"] = rest
    cell.parts = parts


def compare(
    settings: Settings,
    views: list[View],
    realtime: RealtimeSnapshot,
    batch: dict[CellId, BatchCell],
    start_ms: int,
    end_ms: int,
    key_filter: KeyFilter | None = None,
) -> tuple[dict[str, list[Cell]], dict[str, int]]:
    """Cells of both sides, matched, filtered and attributed; per view. Plus what was left out."""
    by_name = {v.name: v for v in views}
    ttl_floor = int(time.time()) - settings.realtime_ttl_s + TTL_MARGIN_S
    lo, hi = start_ms // 1000, end_ms // 1000
    expired_ingest_buckets: set[int] = set()
    filtered_cells = 0
    out: dict[str, list[Cell]] = {v.name: [] for v in views}
    for cell_id in set(batch) | set(realtime.cells):
        name, granularity, key, event_bucket, ingest_bucket = cell_id
        view = by_name.get(name)
        if view is None or granularity not in view.granularities or not lo <= ingest_bucket < hi:
            continue
        if ingest_bucket < ttl_floor:
            expired_ingest_buckets.add(ingest_bucket)
            continue
        if key_filter is not None and not key_filter(view, tuple(json.loads(key))):
            filtered_cells += 1
            continue
        b = batch.get(cell_id, BatchCell())
        present = cell_id in realtime.cells
        if not present and b.first_records + b.recounts == 0:
            continue  # only copies both layers drop: no cell on either side
        cell = Cell(name, granularity, key, event_bucket, ingest_bucket, realtime.cells.get(cell_id, 0.0), present, b)
        attribute(view, cell)
        out[name].append(cell)
    return out, {"expired_ingest_buckets": len(expired_ingest_buckets), "filtered_cells": filtered_cells}


# --- figures --------------------------------------------------------------------------------------

ERROR_BINS = ((0.5, "0"), (1.5, "1"), (2.5, "2"), (5.5, "3–5"), (10.5, "6–10"), (100.5, "11–100"), (math.inf, ">100"))
HLL_BINS = [x / 2 for x in range(-8, 9)]  # edges in units of the bound: -4 … 4


def _r(x: float, digits: int = 4) -> float:
    return round(float(x), digits)


def _exact(view: View, cell: Cell) -> bool:
    return not significant(cell.diff, view.additive)


def _exact_after_duplicates(view: View, cell: Cell) -> bool:
    return not significant(cell.diff - cell.parts.get("duplicates_beyond_window", 0.0), view.additive)


def granularity_figures(view: View, cells: list[Cell]) -> dict:
    n = len(cells)
    errors = [abs(c.diff) for c in cells]
    exact = sum(1 for c in cells if _exact(view, c))
    pct = [abs(c.diff) / c.batch.batch for c in cells if c.batch.batch > 0]
    causes = {cause: {"cells": 0, "amount": 0.0} for cause in CAUSES}
    for c in cells:
        for cause, amount in c.parts.items():
            if significant(amount, view.additive) or cause == "duplicates_beyond_window":
                causes[cause]["cells"] += 1
            causes[cause]["amount"] += amount
    for cause_figures in causes.values():
        cause_figures["amount"] = _r(cause_figures["amount"])
    late = [c for c in cells if c.batch.late_records]
    histogram = [0] * len(ERROR_BINS)
    for err in errors:
        histogram[next(i for i, (edge, _) in enumerate(ERROR_BINS) if err < edge)] += 1
    over_time: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0, 0.0])
    for c in cells:
        t = over_time[c.ingest_bucket]
        t[0] += c.speed
        t[1] += c.batch.batch
        t[2] += abs(c.diff)
        t[3] += 1
        t[4] += c.parts.get("duplicates_beyond_window", 0.0)
    figures: dict[str, Any] = {
        "cells": n,
        "exact_cells": exact,
        "exact_share": _r(exact / n) if n else None,
        "exact_share_after_duplicates": _r(sum(1 for c in cells if _exact_after_duplicates(view, c)) / n)
        if n
        else None,
        "mean_abs_error": _r(sum(errors) / n) if n else 0.0,
        "max_abs_error": _r(max(errors)) if n else 0.0,
        "mape_percent": _r(100 * sum(pct) / len(pct)) if pct else 0.0,
        "speed_total": _r(sum(c.speed for c in cells)),
        "batch_total": _r(sum(c.batch.batch for c in cells)),
        "drift": _r(sum(c.diff for c in cells)),
        "speed_only_cells": sum(1 for c in cells if c.speed_present and not c.batch_present),
        "batch_only_cells": sum(1 for c in cells if c.batch_present and not c.speed_present),
        "duplicate_copies_beyond_window": sum(c.batch.recounts for c in cells),
        "duplicate_copies_within_window": sum(c.batch.dropped for c in cells),
        "beyond_window_candidates_not_recounted": _r(sum(c.not_recounted for c in cells)),
        "late": {
            "cells": len(late),
            "records": sum(c.batch.late_records for c in late),
            "cells_exact_after_duplicates": sum(1 for c in late if _exact_after_duplicates(view, c)),
            "error": causes["late_events"]["amount"],
        },
        "causes": causes,
        "error_histogram": [{"bin": label, "cells": count} for (_, label), count in zip(ERROR_BINS, histogram)],
        "drift_over_time": [
            {
                "ingest_bucket": b,
                "time": _iso(b * 1000),
                "speed": _r(t[0]),
                "batch": _r(t[1]),
                "drift": _r(t[0] - t[1]),
                "abs_error": _r(t[2]),
                "cells": t[3],
                "duplicates": _r(t[4]),
            }
            for b, t in sorted(over_time.items())
        ],
        "worst_keys": _worst_keys(view, cells),
        "worst_cells": [
            _cell_doc(c) for c in sorted(cells, key=lambda c: -abs(c.diff))[:15] if significant(c.diff, view.additive)
        ],
        "scatter": _scatter(view, cells),
    }
    if view.aggregation == "distinct":
        figures["hll"] = hll_figures(cells)
    return figures


def hll_figures(cells: list[Cell]) -> dict:
    """The sketch's relative error against the exact count of what it saw (first copies and recounts)."""
    rel = [(c.speed - c.batch.expected) / c.batch.expected for c in cells if c.speed_present and c.batch.expected > 0]
    sizes: dict[str, list[float]] = {"1–9": [], "10–99": [], "100–999": [], "≥1000": []}
    for c in cells:
        if c.speed_present and c.batch.expected > 0:
            e = c.batch.expected
            label = "1–9" if e < 10 else "10–99" if e < 100 else "100–999" if e < 1000 else "≥1000"
            sizes[label].append((c.speed - e) / e)
    n = len(rel)
    z = [r / HLL_BOUND for r in rel]
    counts = [0] * (len(HLL_BINS) + 1)  # below -4, the 16 bins, above 4
    for v in z:
        counts[sum(1 for edge in HLL_BINS if v >= edge)] += 1
    labels = ["< −4"] + [f"{a:+.1f}…{b:+.1f}" for a, b in zip(HLL_BINS, HLL_BINS[1:])] + ["> +4"]
    return {
        "bound": _r(HLL_BOUND, 6),
        "lg_k": HLL_LG_K,
        "cells": n,
        "within_1x": _r(sum(1 for v in z if abs(v) <= 1) / n) if n else None,
        "within_2x": _r(sum(1 for v in z if abs(v) <= 2) / n) if n else None,
        "within_3x": _r(sum(1 for v in z if abs(v) <= 3) / n) if n else None,
        "mean_relative_error": _r(sum(rel) / n, 6) if n else 0.0,
        "rms_relative_error": _r(math.sqrt(sum(r * r for r in rel) / n), 6) if n else 0.0,
        "max_abs_relative_error": _r(max(abs(r) for r in rel), 6) if n else 0.0,
        "histogram": [{"bin": label, "cells": count} for label, count in zip(labels, counts)],
        "by_size": {
            label: {
                "cells": len(v),
                "rms_relative_error": _r(math.sqrt(sum(r * r for r in v) / len(v)), 6) if v else None,
            }
            for label, v in sizes.items()
        },
    }


def _cell_doc(c: Cell) -> dict:
    return {
        "granularity": c.granularity,
        "key": json.loads(c.key),
        "event_bucket": _iso(c.event_bucket * 1000),
        "ingest_bucket": _iso(c.ingest_bucket * 1000),
        "speed": _r(c.speed),
        "batch": _r(c.batch.batch),
        "diff": _r(c.diff),
        "causes": {k: _r(v) for k, v in c.parts.items()},
        "recounts": c.batch.recounts,
        "late_records": c.batch.late_records,
    }


def _worst_keys(view: View, cells: list[Cell], limit: int = 10) -> list[dict]:
    keys: dict[str, dict] = {}
    for c in cells:
        k = keys.setdefault(
            c.key,
            {
                "key": json.loads(c.key),
                "cells": 0,
                "abs_error": 0.0,
                "max_abs_error": 0.0,
                "drift": 0.0,
                "causes": defaultdict(float),
            },
        )
        k["cells"] += 1
        k["abs_error"] += abs(c.diff)
        k["max_abs_error"] = max(k["max_abs_error"], abs(c.diff))
        k["drift"] += c.diff
        for cause, amount in c.parts.items():
            k["causes"][cause] += amount
    ranked = sorted(
        (k for k in keys.values() if significant(k["abs_error"], view.additive)),
        key=lambda k: (-k["abs_error"], str(k["key"])),
    )[:limit]
    return [
        {
            **k,
            "abs_error": _r(k["abs_error"]),
            "max_abs_error": _r(k["max_abs_error"]),
            "drift": _r(k["drift"]),
            "causes": {c: _r(v) for c, v in k["causes"].items()},
        }
        for k in ranked
    ]


def _scatter(view: View, cells: list[Cell]) -> list[list[float]]:
    """[batch, speed, differs] points: every differing cell (up to a cap) and an even sample of the rest."""
    differing = [c for c in cells if significant(c.diff, view.additive)]
    same = [c for c in cells if not significant(c.diff, view.additive)]
    differing.sort(key=lambda c: -abs(c.diff))
    differing = differing[: MAX_SCATTER * 2 // 3]
    room = MAX_SCATTER - len(differing)
    step = max(1, math.ceil(len(same) / room)) if room > 0 else len(same) + 1
    same.sort(key=lambda c: (c.batch.batch, c.key, c.event_bucket, c.ingest_bucket))
    return [
        [_r(c.batch.batch, 2), _r(c.speed, 2), 1 if significant(c.diff, view.additive) else 0]
        for c in differing + same[::step]
    ]


def view_report(view: View, cells: list[Cell]) -> dict:
    by_granularity = {g: [c for c in cells if c.granularity == g] for g in view.granularities}
    granularities = {g: granularity_figures(view, cs) for g, cs in by_granularity.items()}
    finest = min(view.granularities, key=lambda g: GRANULARITIES[g])
    differing = sorted((c for c in cells if significant(c.diff, view.additive)), key=lambda c: -abs(c.diff))
    return {
        "name": view.name,
        "keys": list(view.keys),
        "aggregation": view.aggregation,
        "column": view.column,
        "layout": view.layout,
        "additive": view.additive,
        "description": view.description,
        "finest": finest,
        "granularities": granularities,
        "differences": [_cell_doc(c) for c in differing[:MAX_DIFFERENCES]],
        "differences_total": len(differing),
    }


def view_summary(view: View, details: dict) -> dict:
    """The short per-view line: at the finest granularity; cell counts of the causes over all of them."""
    fine = details["granularities"][details["finest"]]
    cells_by_cause = {
        cause: sum(g["causes"][cause]["cells"] for g in details["granularities"].values()) for cause in CAUSES
    }
    summary = {
        "granularity": details["finest"],
        "cells": fine["cells"],
        "exact_share": fine["exact_share"],
        "exact_share_after_duplicates": fine["exact_share_after_duplicates"],
        "drift": fine["drift"],
        "mean_abs_error": fine["mean_abs_error"],
        "max_abs_error": fine["max_abs_error"],
        "mape_percent": fine["mape_percent"],
        "causes": {cause: fine["causes"][cause]["amount"] for cause in CAUSES},
        "cells_by_cause": cells_by_cause,
        "late_cells": fine["late"]["cells"],
        "ok": all(cells_by_cause[c] == 0 for c in ("accepted_by_one_layer", "late_events", "unexplained")),
    }
    if view.aggregation == "distinct":
        summary["hll_within_3x_bound"] = fine["hll"]["within_3x"]
    return summary


# --- the report -----------------------------------------------------------------------------------


def build_report(
    settings: Settings,
    spark,
    previous_cutoff_ms: int,
    cutoff_ms: int,
    version: int | None,
    run_id: str,
    key_filter: KeyFilter | None = None,
    realtime: RealtimeSnapshot | None = None,
    batch: tuple[dict[CellId, BatchCell], dict] | None = None,
    wait_for_speed_s: float = 180.0,
) -> dict:
    """Compare the speed layer with the batch layer over the ingest window [previous_cutoff_ms, cutoff_ms).

    `key_filter(view, key values)` keeps only matching keys (for tests sharing the stack with other
    traffic). `realtime` is a snapshot read earlier with `read_realtime` (for callers that must
    read Cassandra before realtime rows below the cutoff are cleaned up); by default the rows are
    read now, after waiting up to `wait_for_speed_s` for the speed layer to pass the cutoff.
    `batch` is the window's batch side computed earlier by `batch_cells` (to build several reports
    of one window, e.g. with different key filters, from one Spark pass).
    """
    bucket_ms = settings.ingest_bucket_s * 1000
    if previous_cutoff_ms % bucket_ms or cutoff_ms % bucket_ms:
        raise ValueError(f"the window's ends must be on ingest-bucket boundaries ({settings.ingest_bucket_s}s)")
    if not 0 <= previous_cutoff_ms <= cutoff_ms:
        raise ValueError("the window must run forward from a non-negative previous cutoff")
    started = time.monotonic()
    created = datetime.now(UTC)
    views = list(load_views(settings))
    speed = (
        wait_for_speed_layer(settings, cutoff_ms, wait_for_speed_s)
        if realtime is None
        else {"caught_up": None, "snapshot_read": _iso(realtime.read_ms)}
    )
    if realtime is None:
        realtime = read_realtime(settings, previous_cutoff_ms, cutoff_ms, views)
    elif realtime.start_ms > previous_cutoff_ms or (realtime.end_ms is not None and realtime.end_ms < cutoff_ms):
        raise ValueError("the realtime snapshot does not cover the report's window")
    exact, inputs = batch if batch is not None else batch_cells(settings, spark, views, previous_cutoff_ms, cutoff_ms)
    cells, skipped = compare(settings, views, realtime, exact, previous_cutoff_ms, cutoff_ms, key_filter)
    details = {view.name: view_report(view, cells[view.name]) for view in views}
    summary = {view.name: view_summary(view, details[view.name]) for view in views}
    problems = [
        f"{name}: {s['cells_by_cause'][cause]} cell(s) {cause.replace('_', ' ')}"
        for name, s in summary.items()
        for cause in ("accepted_by_one_layer", "late_events", "unexplained")
        if s["cells_by_cause"][cause]
    ]
    if speed.get("caught_up") is False:
        problems.insert(0, "the speed layer had not processed the whole window when its rows were read")
    if realtime.unreadable:
        problems.insert(
            0,
            f"{len(realtime.unreadable)} token range(s) of the realtime tables could not be read: "
            "their rows count as missing from the speed side ("
            + "; ".join(u.describe() for u in realtime.unreadable[:3])
            + ")",
        )
    report: dict[str, Any] = {
        "id": report_id(created, run_id),
        "created": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "window": {
            "start": _iso(previous_cutoff_ms),
            "end": _iso(cutoff_ms),
            "start_ms": previous_cutoff_ms,
            "end_ms": cutoff_ms,
        },
        "version": version,
        "run_id": run_id,
        "ok": not problems,
        "problems": problems,
        "summary": summary,
        "settings": {
            "ingest_bucket_s": settings.ingest_bucket_s,
            "dedupe_window_s": settings.speed.dedupe_window_s,
            "hll_lg_k": HLL_LG_K,
            "hll_bound": _r(HLL_BOUND, 6),
            "sketch_tolerance": SKETCH_TOLERANCE,
            "late_after_s": LATE_AFTER_S,
        },
        "speed_layer": speed,
        "inputs": {
            **inputs,
            "realtime_rows_read": realtime.rows,
            "realtime_read": _iso(realtime.read_ms),
            "realtime_unreadable": [u.describe() for u in realtime.unreadable],
            "skipped_expired_ingest_buckets": skipped["expired_ingest_buckets"],
            "filtered_out_cells": skipped["filtered_cells"],
            "key_filter": key_filter is not None,
        },
        "views": details,
        "seconds": round(time.monotonic() - started, 1),
    }
    log.info(
        "accuracy report %s over %s – %s: %s",
        report["id"],
        report["window"]["start"],
        report["window"]["end"],
        "; ".join(f"{n} exact {s['exact_share']} drift {s['drift']}" for n, s in summary.items()),
    )
    return report


def report_id(created: datetime, run_id: str) -> str:
    """Sortable by creation and safe as a file name ([A-Za-z0-9_.-], at most 100 characters)."""
    tail = re.sub(r"[^A-Za-z0-9_.-]", "_", run_id or "adhoc").strip("._") or "adhoc"
    return f"{created:%Y%m%dT%H%M%SZ}-{tail}"[:100]


def reports_dir(settings: Settings) -> Path:
    return settings.state_dir / "reports"


def store_report(settings: Settings, report: dict, html: str) -> dict:
    """Write `<id>.json` and `<id>.html` under state_dir/reports (what the API serves) and a copy on
    HDFS under /lambda/reports/; their paths."""
    from stores.webhdfs import WebHdfs

    rid = report["id"]
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", rid):
        raise ValueError(f"bad report id {rid!r}")
    folder = reports_dir(settings)
    folder.mkdir(parents=True, exist_ok=True)
    payload = {".json": json.dumps(report, indent=1, sort_keys=False, default=str).encode(), ".html": html.encode()}
    paths: dict[str, str] = {}
    for suffix, data in payload.items():
        target = folder / f"{rid}{suffix}"
        tmp = folder / f".{rid}{suffix}.tmp"
        tmp.write_bytes(data)
        tmp.replace(target)  # the API never reads a half-written file
        paths[suffix[1:]] = str(target)
    with WebHdfs(settings, timeout_s=30) as fs:
        fs.mkdirs(HDFS_DIR)
        for suffix, data in payload.items():
            fs.write(f"{HDFS_DIR}/{rid}{suffix}", data)
            paths[f"hdfs_{suffix[1:]}"] = f"{settings.hdfs.url}{HDFS_DIR}/{rid}{suffix}"
    return paths


def latest_reports(settings: Settings, n: int = 10) -> list[dict]:
    """The newest `n` stored reports (full documents), newest first."""
    folder = reports_dir(settings)
    out = []
    for path in sorted(folder.glob("*.json"), reverse=True) if folder.is_dir() else []:
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
        if len(out) >= n:
            break
    return out


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _date(ms: int) -> date:
    return datetime.fromtimestamp(ms / 1000, UTC).date()


def report_for_version(settings: Settings, spark, version: int | None = None) -> dict:
    """The report of a batch version's window: [its run's previous cutoff, its cutoff)."""
    from stores.batch_views import VersionStore

    store = VersionStore(settings)
    if version is None:
        pointer = store.pointer()
        if pointer is None:
            raise RuntimeError("no batch version serves yet")
        version = pointer.version
    run = store.runs().get(version)
    if run is None or "cutoff_ms" not in run:
        raise RuntimeError(f"no run recorded for version {version}")
    previous = run.get("previous_cutoff_ms")
    if previous is None:  # runs recorded before the previous cutoff was kept: the newest earlier cutoff
        earlier = [
            r["cutoff_ms"]
            for v, r in store.runs().items()
            if v < version and r.get("state") in ("live", "retired", "dropped") and "cutoff_ms" in r
        ]
        previous = max((c for c in earlier if c <= run["cutoff_ms"]), default=0)
    return build_report(
        settings, spark, int(previous), int(run["cutoff_ms"]), version, run.get("run_id", f"v{version}")
    )


def main(argv: list[str] | None = None) -> int:
    from batch_layer.report_html import render_html
    from definitions.settings import get_settings
    from definitions.spark import spark_session

    parser = argparse.ArgumentParser(description="Accuracy report: speed layer versus batch layer over a batch window.")
    parser.add_argument("--version", type=int, help="batch version whose window to report (default: the serving one)")
    parser.add_argument("--previous-cutoff-ms", type=int, help="window start (with --cutoff-ms: an explicit window)")
    parser.add_argument("--cutoff-ms", type=int, help="window end")
    args = parser.parse_args(argv)
    settings = get_settings()
    configure_from("accuracy-report", settings)
    spark = spark_session(settings, "lambda-accuracy", {"spark.driver.memory": settings.batch.driver_memory})
    try:
        if args.cutoff_ms is not None:
            report = build_report(settings, spark, args.previous_cutoff_ms or 0, args.cutoff_ms, args.version, "adhoc")
        else:
            report = report_for_version(settings, spark, args.version)
        paths = store_report(settings, report, render_html(report))
    finally:
        spark.stop()
    sys.stdout.write(
        json.dumps({"id": report["id"], "ok": report["ok"], "problems": report["problems"], **paths}) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
