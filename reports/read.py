"""The two sides of a report, read from the stores.

- speed: the realtime rows the speed layer holds in Cassandra (stores.realtime, scanned token
  range by token range with stores.realtime_scan); for distinct views the estimate of the row's
  HyperLogLog sketch;
- batch: the exact value of every cell recomputed with Spark from the master dataset
  (stores.master), from the records ingested in the window that are the first copy of their
  event_id over the WHOLE master dataset (the batch layer's de-duplication), bucketed by ingest
  bucket as the speed layer does; with, per cell, the copies the speed layer counts again.

And the wait for the speed layer: until its last committed micro-batch is past every Kafka record
(stores.kafka.offsets_at) ingested before the window's end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, date, datetime
from typing import Any

from definitions.events import FIELD_NAMES
from definitions.settings import Settings
from definitions.views import View, key_text
from reports.cells import DAMAGED_NAMED, LATE_AFTER_S, BatchCell, CellId, RealtimeSnapshot
from stores.checkpoints import speed_layer_position
from stores.kafka import offsets_at
from stores.view_versions import read_versions

log = logging.getLogger("lambda.accuracy")


# --- the speed side -------------------------------------------------------------------------------


def read_realtime(
    settings: Settings, start_ms: int, end_ms: int | None = None, views: Iterable[View] | None = None
) -> RealtimeSnapshot:
    """Every realtime row of the declared views whose ingest bucket is in [start_ms, end_ms).

    A filtered scan of both realtime tables (ALLOW FILTERING on ingest_bucket), token range by
    token range: a range that cannot be read is recorded in `unreadable`, not fatal.
    Distinct views: the sketch's estimate. A row the speed layer cannot have written (as the serving
    layer refuses it) is left out and counted in `damaged_rows`; keys are read as key_text writes them. A view a switched replay answers for (stores.replays):
    its replayed rows for the ingest buckets they cover, as the serving layer reads them.
    """
    from definitions.sketches import BadSketch, read_sketch
    from stores.realtime import BadRealtimeRow
    from stores.realtime_scan import rows_ingested_between
    from stores.realtime_schema import BY_BUCKET, read_ttl_changes
    from stores.replays import read_overlays

    registry = {v.name: v for v in (views if views is not None else read_versions(settings).maintained)}
    overlays = read_overlays(settings)
    replayed = {o.shadow: o.view for o in overlays.values()}
    snapshot = RealtimeSnapshot(
        start_ms,
        end_ms,
        int(time.time() * 1000),
        ttl_changes=read_ttl_changes(settings),
        maintained_ms=_maintained_ms(settings, overlays),
    )
    for table, row in rows_ingested_between(settings, start_ms, end_ms, unreadable=snapshot.unreadable):
        name = replayed.get(row.view_name, row.view_name)
        overlay = overlays.get(name)
        if overlay is not None and overlay.switched and name == row.view_name:
            if overlay.from_ms // 1000 <= row.ingest_bucket < int(overlay.split_ms or 0) // 1000:
                continue  # the replay's row answers for this one
        view = registry.get(name)
        if view is None or (view.layout == "by_bucket") != (table == BY_BUCKET):
            continue
        try:
            key, value = _checked(view, row, read_sketch)
        except (BadRealtimeRow, BadSketch) as exc:
            snapshot.damaged_rows += 1
            if len(snapshot.damaged) < DAMAGED_NAMED:
                snapshot.damaged.append(f"{name} {row.granularity} bucket {row.event_bucket}: {exc}"[:300])
            continue
        snapshot.cells[(name, row.granularity, key, row.event_bucket, row.ingest_bucket)] = value
        snapshot.rows += 1
    return snapshot


def _maintained_ms(settings: Settings, overlays: dict) -> dict[str, int] | None:
    """Since when the speed layer holds each view's rows (its marker: stores.view_lifecycle), or a
    switched replay's rows from earlier (`overlays`, stores.replays); None: every view since its
    first start, or the marker is unreadable (the speed layer refuses to start then)."""
    from stores import checkpoints

    try:
        marker = checkpoints.read_marker(settings)
    except checkpoints.MarkerUnreadable as exc:
        log.warning("the speed layer's marker is unreadable (%s): every view's rows taken as held", exc)
        return None
    if marker is None or marker.views is None:
        return None
    since = dict(marker.views)
    for name, overlay in overlays.items():
        if overlay.switched and name in since:
            since[name] = min(since[name], overlay.from_ms)
    return since


def _checked(view: View, row: Any, read_sketch) -> tuple[str, float]:
    """(the row's key as key_text writes it, its value: a distinct view's, its sketch's estimate), as
    the serving layer reads rows (stores.realtime): BadRealtimeRow or BadSketch for a row the speed
    layer cannot have written."""
    from stores.realtime import BadRealtimeRow, canonical_key

    key = canonical_key(row.key)
    if row.value is None or row.value < 0:
        raise BadRealtimeRow(f"a value of {row.value}: null or negative")
    if view.aggregation != "distinct":
        return key, float(row.value)
    sketch = getattr(row, "sketch", None)
    if sketch is None:
        raise BadRealtimeRow("a distinct view's row without its sketch")
    return key, read_sketch(bytes(sketch)).get_estimate()


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


# The figures' key of the ingest buckets below `cells_from_s` that hold records (batch_cells): taken
# out of the figures by the comparison, which counts them as left out (reports.compare.match_cells).
BUCKETS_NOT_COMPUTED = "ingest_buckets_not_computed"


def later_copies(chains, window_us: int):
    """Each later copy of a chain (column `c`: an event's copies as structs t (µs), p, o, sorted):
    kafka_partition, kafka_offset, gap_us (from the last copy counted before it) and recount (more
    than `window_us` after it: counted again).

    A fold that appended a mark per copy to its accumulator copied the array at each step (the
    square of a chain's length: one event_id sent 100,000 times kept the report from ever
    finishing). The fold now keeps only the counted copies, and each copy is marked from them: the
    work is a chain's length times its counted copies. Those are each over the de-duplication
    window after the one before, in ingest time (Kafka's LogAppendTime: no producer sets it), so a
    chain's span in real time bounds them, not how many copies a producer sends at once."""
    from pyspark.sql import functions as F

    indexed = chains.select(
        F.transform(
            "c", lambda x, i: F.struct(x["t"].alias("t"), x["p"].alias("p"), x["o"].alias("o"), i.alias("i"))
        ).alias("c")
    )
    rest = F.slice("c", 2, F.size("c") - 1)
    counted_type = "array<struct<i:int,t:bigint>>"

    def step(acc, x):
        beyond = (x["t"] - acc["ref"]) > F.lit(window_us)
        return F.struct(
            F.when(beyond, x["t"]).otherwise(acc["ref"]).alias("ref"),
            F.when(beyond, F.concat(acc["n"], F.array(F.struct(x["i"].alias("i"), x["t"].alias("t")))))
            .otherwise(acc["n"])
            .alias("n"),
        )

    first = F.col("c")[0]
    start = F.struct(
        first["t"].alias("ref"),
        F.array(F.struct(first["i"].alias("i"), first["t"].alias("t"))).cast(counted_type).alias("n"),
    )
    counted = indexed.select("c", F.aggregate(rest, start, step)["n"].alias("n"))

    def mark(x):
        before = F.filter("n", lambda r: r["i"] < x["i"])
        return F.struct(
            x["p"].alias("p"),
            x["o"].alias("o"),
            (x["t"] - F.array_max(F.transform(before, lambda r: r["t"]))).alias("gap_us"),
            F.exists("n", lambda r: r["i"] == x["i"]).alias("recount"),
        )

    return counted.select(F.explode(F.transform(rest, mark)).alias("x")).select(
        F.col("x.p").alias("kafka_partition"), F.col("x.o").alias("kafka_offset"), "x.gap_us", "x.recount"
    )


def batch_cells(
    settings: Settings, spark, views: list[View], start_ms: int, end_ms: int, cells_from_s: int | None = None
) -> tuple[dict[CellId, BatchCell], dict]:
    """Exact cells of the window from the master dataset, with Spark; and figures about its records.
    Cells of ingest buckets below `cells_from_s` (older than the realtime rows' TTL: not compared)
    are not computed, only listed (BUCKETS_NOT_COMPUTED): a window from the start of history (a
    first run, a view just added) would otherwise bring every cell of it to the driver."""
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
    later = later_copies(chains, window_us)
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
        compared = tagged
        if cells_from_s is not None:
            compared = tagged.where(F.col("ingest_bucket") >= F.lit(cells_from_s))
            figures[BUCKETS_NOT_COMPUTED] = sorted(
                row.ingest_bucket
                for row in tagged.where(F.col("ingest_bucket") < F.lit(cells_from_s))
                .select("ingest_bucket")
                .distinct()
                .collect()
            )
        frames = [
            frame
            for view in views
            for granularity in view.granularities
            for frame in _view_parts(view, granularity, compared)
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
                fold(cell, aggregation[row.view], row.part, row.status, row.late, row.value or 0)
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


def fold(cell: BatchCell, aggregation: str, part: str, status: str | None, late: bool | None, value: float) -> None:
    """Add one row of `_view_parts` (a part of a cell, by status and lateness) to the cell."""
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


def _date(ms: int) -> date:
    return datetime.fromtimestamp(ms / 1000, UTC).date()
