"""A report, assembled: the window of a batch version, both sides of it compared, the document.

`window_for_version` is the one lookup of a version's window (its run record in the VersionStore),
for the CLI, `python -m reports` and anything else. `compare_window` reads both sides (the I/O);
`assemble` turns a comparison into the report document (pure); `build_report` does both, and
`produce` builds, renders and stores.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from definitions.settings import Settings
from definitions.times import iso_ms
from definitions.views import HLL_LG_K, View
from reports.attribute import PROBLEMS
from reports.cells import HLL_BOUND, LATE_AFTER_S, SKETCH_TOLERANCE, BatchCell, Cell, CellId, RealtimeSnapshot
from reports.compare import match_cells, view_report, view_summary
from stores.realtime_ttl import alive_from_ms
from stores.view_versions import read_versions

log = logging.getLogger("lambda.accuracy")

TTL_MARGIN_S = 3_600  # ingest buckets this close to the realtime rows' TTL are not compared


class NoWindow(LookupError):
    """No batch version serves, or none is recorded under the version asked for."""


@dataclass(frozen=True)
class Window:
    """The ingest window a batch run absorbed, [start_ms, end_ms), and that run."""

    start_ms: int
    end_ms: int
    version: int | None = None
    run_id: str = "adhoc"


def window_for_version(settings: Settings, version: int | None = None) -> Window:
    """The window of a batch version (default: the serving one): [its run's previous cutoff, its
    cutoff). Runs recorded before the previous cutoff was kept: the newest earlier cutoff."""
    from stores.registry import version_store

    store = version_store(settings)
    if version is None:
        pointer = store.pointer()
        if pointer is None:
            raise NoWindow("no batch version serves yet")
        version = pointer.version
    runs = store.runs()
    run = runs.get(version)
    if run is None or "cutoff_ms" not in run:
        raise NoWindow(f"no batch run recorded for version {version}")
    previous = run.get("previous_cutoff_ms")
    if previous is None:
        earlier = [
            r["cutoff_ms"]
            for v, r in runs.items()
            if v < version and r.get("state") in ("live", "retired", "dropped") and "cutoff_ms" in r
        ]
        previous = max((c for c in earlier if c <= run["cutoff_ms"]), default=0)
    return Window(int(previous), int(run["cutoff_ms"]), version, run.get("run_id") or f"v{version}")


def cleaned_below_s(runs: Mapping[int, Mapping]) -> dict[str, int]:
    """Per view, the ingest time (s) below which the realtime clean-up deleted its rows (recorded on
    the run that served when it began: lambdactl.batch.cmd_clean_realtime)."""
    below: dict[str, int] = {}
    for run in runs.values():
        for view, cutoff_s in (run.get("realtime_cleaned_s") or {}).items():
            below[str(view)] = max(below.get(str(view), 0), int(cutoff_s))
    return below


def maintained_from_s(
    maintained_ms: Mapping[str, int] | None, views: list[View], bucket_s: int, end_ms: int
) -> dict[str, int]:
    """Per view, the first ingest bucket (s) whose events the speed layer saw whole: the one after it
    began maintaining the view (RealtimeSnapshot.maintained_ms); for a view it does not maintain, the
    window's end. {} when every view is maintained from the speed layer's first start."""
    if maintained_ms is None:
        return {}
    out = {}
    for view in views:
        since_ms = maintained_ms.get(view.name)
        out[view.name] = end_ms // 1000 if since_ms is None else -(-since_ms // (bucket_s * 1000)) * bucket_s
    return out


def check_not_cleaned(views: list[View], cleaned_s: Mapping[str, int], start_ms: int, end_ms: int) -> None:
    """Refuse a window whose realtime rows the clean-up deleted for every view: nothing is left to
    compare (a window it deleted in part is compared where rows are left: match_cells; an empty one,
    a recomputation at the same cutoff, has nothing to compare either way)."""
    if views and start_ms < end_ms and all(cleaned_s.get(v.name, 0) * 1000 >= end_ms for v in views):
        raise NoWindow(
            f"the realtime clean-up was started on the rows of the window ending {iso_ms(end_ms)} (below "
            f"{iso_ms(min(cleaned_s[v.name] for v in views) * 1000)}; they are deleted, or will be once it "
            "finishes): a report compares them with the "
            "batch, so it is made before the clean-up, as the DAG's report task is (`lambdactl report` lists them)"
        )


@dataclass
class Comparison:
    """Both sides of a window, matched cell by cell (what `assemble` makes a report of)."""

    start_ms: int
    end_ms: int
    views: list[View]
    cells: dict[str, list[Cell]]  # per view, attributed
    skipped: dict[str, int]  # {"expired_ingest_buckets": n, "cleaned_ingest_buckets": n}
    realtime: RealtimeSnapshot
    inputs: dict[str, Any]  # figures about the master records of the window (read.batch_cells)
    speed: dict[str, Any]  # the wait for the speed layer, or when the given snapshot was read
    began: datetime = field(default_factory=lambda: datetime.now(UTC))
    seconds: float = 0.0


def check_window(settings: Settings, start_ms: int, end_ms: int) -> None:
    bucket_ms = settings.ingest_bucket_s * 1000
    if start_ms % bucket_ms or end_ms % bucket_ms:
        raise ValueError(f"the window's ends must be on ingest-bucket boundaries ({settings.ingest_bucket_s}s)")
    if not 0 <= start_ms <= end_ms:
        raise ValueError("the window must run forward from a non-negative previous cutoff")


def compare_window(
    settings: Settings,
    spark,
    start_ms: int,
    end_ms: int,
    realtime: RealtimeSnapshot | None = None,
    batch: tuple[dict[CellId, BatchCell], dict] | None = None,
    wait_for_speed_s: float = 180.0,
) -> Comparison:
    """Read both sides of [start_ms, end_ms) and match them.

    `realtime` is a snapshot read earlier with `read.read_realtime` (for callers that must read
    Cassandra before realtime rows below the cutoff are cleaned up); by default the rows are read
    now, after waiting up to `wait_for_speed_s` for the speed layer to pass the window's end.
    `batch` is the window's batch side computed earlier by `read.batch_cells` (one Spark pass for
    several comparisons of one window).
    """
    from reports.read import BUCKETS_NOT_COMPUTED, batch_cells, read_realtime, wait_for_speed_layer

    check_window(settings, start_ms, end_ms)
    began, started = datetime.now(UTC), time.monotonic()
    views = list(read_versions(settings).maintained)  # under their storage names (definitions.view_versions)
    cleaned_s: dict[str, int] = {}
    if realtime is None:
        from stores.registry import version_store

        store = version_store(settings)
        check_not_cleaned(views, cleaned_below_s(store.runs()), start_ms, end_ms)
        speed = wait_for_speed_layer(settings, end_ms, wait_for_speed_s)
        realtime = read_realtime(settings, start_ms, end_ms, views)
        # Read again after the rows: a clean-up records where it deletes before deleting, so this
        # covers every deletion the read may have met (one begun meanwhile, after a swap elsewhere).
        cleaned_s = cleaned_below_s(store.runs())
    elif realtime.start_ms > start_ms or (realtime.end_ms is not None and realtime.end_ms < end_ms):
        raise ValueError("the realtime snapshot does not cover the report's window")
    else:
        speed = {"caught_up": None, "snapshot_read": iso_ms(realtime.read_ms)}
    # Ingest buckets from here on have every row still there TTL_MARGIN_S from now, by the TTL each
    # row was written with (a raise leaves older rows on the old one).
    record = realtime.ttl_changes or ((0, settings.realtime_ttl_s),)
    ttl_floor_s = alive_from_ms(record, (int(time.time()) + TTL_MARGIN_S) * 1000) // 1000
    exact, inputs = batch if batch is not None else batch_cells(settings, spark, views, start_ms, end_ms, ttl_floor_s)
    inputs = dict(inputs)
    not_computed = inputs.pop(BUCKETS_NOT_COMPUTED, [])
    maintained_s = maintained_from_s(realtime.maintained_ms, views, settings.ingest_bucket_s, end_ms)
    cells, skipped = match_cells(
        views, realtime.cells, exact, start_ms, end_ms, ttl_floor_s, cleaned_s, set(not_computed), maintained_s
    )
    return Comparison(
        start_ms, end_ms, views, cells, skipped, realtime, inputs, speed, began, time.monotonic() - started
    )


def assemble(settings: Settings, comparison: Comparison, version: int | None, run_id: str) -> dict:
    """The report document of a comparison (stored as JSON; docs/reports.md lists its fields)."""
    started = time.monotonic()
    c = comparison
    details = {view.name: view_report(view, c.cells.get(view.name, [])) for view in c.views}
    summary = {view.name: view_summary(view, details[view.name]) for view in c.views}
    problems = [
        f"{name}: {s['cells_by_cause'][cause]} cell(s) {cause.replace('_', ' ')}"
        for name, s in summary.items()
        for cause in PROBLEMS
        if s["cells_by_cause"][cause]
    ]
    if c.speed.get("caught_up") is False:
        problems.insert(0, "the speed layer had not processed the whole window when its rows were read")
    expired, cleaned = c.skipped.get("expired_ingest_buckets", 0), c.skipped.get("cleaned_ingest_buckets", 0)
    unmaintained = c.skipped.get("unmaintained_ingest_buckets", 0)
    if expired or cleaned or unmaintained:
        problems.insert(
            0,
            f"part of the window was not compared: {expired} ingest bucket(s) whose realtime rows expired "
            f"(realtime_ttl_s), {cleaned} view ingest bucket(s) whose rows were cleaned up after a swap, "
            f"{unmaintained} view ingest bucket(s) from before the speed layer maintained the view (added or "
            "changed since); only the rest of the window is compared",
        )
    if c.realtime.damaged_rows:
        problems.insert(
            0,
            f"{c.realtime.damaged_rows} realtime row(s) the speed layer cannot have written were left out "
            "(the serving layer refuses them too): " + "; ".join(c.realtime.damaged[:3]),
        )
    if c.realtime.unreadable:
        problems.insert(
            0,
            f"{len(c.realtime.unreadable)} token range(s) of the realtime tables could not be read: "
            "their rows count as missing from the speed side ("
            + "; ".join(u.describe() for u in c.realtime.unreadable[:3])
            + ")",
        )
    report: dict[str, Any] = {
        "id": report_id(c.began, run_id),
        "created": c.began.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "window": {"start": iso_ms(c.start_ms), "end": iso_ms(c.end_ms), "start_ms": c.start_ms, "end_ms": c.end_ms},
        "version": version,
        "run_id": run_id,
        "ok": not problems,
        "problems": problems,
        "summary": summary,
        "settings": {
            "ingest_bucket_s": settings.ingest_bucket_s,
            "dedupe_window_s": settings.speed.dedupe_window_s,
            "hll_lg_k": HLL_LG_K,
            "hll_bound": round(HLL_BOUND, 6),
            "sketch_tolerance": SKETCH_TOLERANCE,
            "late_after_s": LATE_AFTER_S,
        },
        "speed_layer": c.speed,
        "inputs": {
            **c.inputs,
            "realtime_rows_read": c.realtime.rows,
            "realtime_read": iso_ms(c.realtime.read_ms),
            "realtime_unreadable": [u.describe() for u in c.realtime.unreadable],
            "realtime_damaged_rows": c.realtime.damaged_rows,
            "realtime_damaged": c.realtime.damaged,
            "skipped_expired_ingest_buckets": c.skipped["expired_ingest_buckets"],
            "skipped_cleaned_ingest_buckets": c.skipped.get("cleaned_ingest_buckets", 0),
            "skipped_unmaintained_ingest_buckets": c.skipped.get("unmaintained_ingest_buckets", 0),
        },
        "views": details,
        "seconds": round(c.seconds + time.monotonic() - started, 1),
    }
    log.info(
        "accuracy report %s over %s – %s: %s",
        report["id"],
        report["window"]["start"],
        report["window"]["end"],
        "; ".join(f"{n} exact {s['exact_share']} drift {s['drift']}" for n, s in summary.items()),
    )
    return report


def build_report(
    settings: Settings,
    spark,
    previous_cutoff_ms: int,
    cutoff_ms: int,
    version: int | None,
    run_id: str,
    realtime: RealtimeSnapshot | None = None,
    batch: tuple[dict[CellId, BatchCell], dict] | None = None,
    wait_for_speed_s: float = 180.0,
) -> dict:
    """Compare the speed layer with the batch layer over the ingest window [previous_cutoff_ms, cutoff_ms)."""
    comparison = compare_window(settings, spark, previous_cutoff_ms, cutoff_ms, realtime, batch, wait_for_speed_s)
    return assemble(settings, comparison, version, run_id)


def report_for_version(settings: Settings, spark, version: int | None = None) -> dict:
    """The report of a batch version's window (default: the serving version's)."""
    window = window_for_version(settings, version)
    return build_report(settings, spark, window.start_ms, window.end_ms, window.version, window.run_id)


def produce(settings: Settings, spark, window: Window) -> tuple[dict, dict[str, str]]:
    """Build the report of a window, render it and store both: (the report, where it was stored)."""
    from reports.render import render_html
    from reports.storage import store_report

    report = build_report(settings, spark, window.start_ms, window.end_ms, window.version, window.run_id)
    return report, store_report(settings, report, render_html(report))


def report_id(created: datetime, run_id: str) -> str:
    """Sortable by creation, to the millisecond (two reports of one second are two), and safe as a
    file name ([A-Za-z0-9_.-], at most 100 characters)."""
    tail = re.sub(r"[^A-Za-z0-9_.-]", "_", run_id or "adhoc").strip("._") or "adhoc"
    return f"{created:%Y%m%dT%H%M%S}.{created.microsecond // 1000:03d}Z-{tail}"[:100]
