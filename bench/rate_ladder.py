"""The speed layer's highest sustained input rate (part 2 of bench/speed_freshness.py): a ladder of rate
steps, each judged by the trend of the lag just after each batch commit and by the drain after it."""

from __future__ import annotations

import logging
import statistics
import time
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from figures import fmt  # bench/ itself: the scripts run as files
from generator_thread import Background  # bench/ itself
from speed_lag import LagProbe, speed_progress  # bench/ itself

from definitions.settings import Settings
from ingest.generator import GeneratorConfig

log = logging.getLogger("bench.speed")
# A step is sustained when the lag's trend adds less than this many seconds of input over the step
# (the speed layer's trigger interval when it was 5 s; fixed since, so figures stay comparable).
GROWTH_TOLERANCE_S = 5.0


def least_squares_slope(points: list[tuple[float, float]]) -> float | None:
    if len(points) < 3:
        return None
    try:
        return statistics.linear_regression([t for t, _ in points], [v for _, v in points]).slope
    except statistics.StatisticsError:
        return None


def wait_drained(lag: LagProbe, target_end: int, timeout: float) -> float | None:
    """Seconds until the speed layer has committed everything up to `target_end`; None on timeout."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        _, committed = lag.committed()
        if committed >= target_end:
            return time.monotonic() - started
        time.sleep(0.5)
    return None


def step_config(run: str, rate: int, count: int) -> GeneratorConfig:
    """The generator's workload of one step: events of their own for each run and rate. The speed
    layer holds an id until its watermark (which stands still while nothing arrives) passes the
    id's ingest time + window; ids sent again by a later run would all be copies it drops."""
    seed = zlib.crc32(f"{run}/{rate}".encode())
    return GeneratorConfig(seed=seed, count=count, rate=rate, url_prefix=f"/bench-rate-{run}")


def generator_source(settings: Settings, run: str) -> Callable[[int, int], Background]:
    """Steps sent by the platform's generator (one Python process: up to ~9,000 records/s here)."""

    def start(rate: int, count: int) -> Background:
        return Background(settings, step_config(run, rate, count)).start()

    return start


# What a step keeps of each batch's progress (stores.progress): its figures and where its time went.
BATCH_FIELDS = (
    "timestamp",
    "input_rows",
    "input_rows_per_s",
    "processed_rows_per_s",
    "batch_ms",
    "rows_behind",
    "duration_ms",
    "state_by_operator",
)
STATE_TIMES = ("updates_ms", "removals_ms", "commit_ms")


def time_breakdown(batches: list[dict]) -> dict | None:
    """Where the batches' time went, per 1,000 input rows over all of them: Spark's durationMs parts
    (wall time of the driver's phases; addBatch runs the tasks) and each stateful operator's update,
    removal and commit times (task time, summed over its partitions, which run side by side)."""
    rows = sum(b.get("input_rows") or 0 for b in batches)
    if rows <= 0:
        return None
    per_1k = 1000 / rows
    wall: dict[str, float] = {}
    state: dict[str, dict[str, float]] = {}
    for b in batches:
        for part, ms in (b.get("duration_ms") or {}).items():
            wall[part] = wall.get(part, 0) + (ms or 0) * per_1k
        for op in b.get("state_by_operator") or ():
            times = state.setdefault(op.get("operator") or "?", dict.fromkeys(STATE_TIMES, 0.0))
            for name in STATE_TIMES:
                times[name] += (op.get(name) or 0) * per_1k
    return {"batches": len(batches), "rows": rows, "wall_ms": wall, "state_task_ms": state}


def rate_step(
    settings: Settings,
    lag: LagProbe,
    run: str,
    rate: int,
    duration: float,
    drain_timeout: float,
    source: Callable[[int, int], Any] | None = None,
    progress_of: Callable[[], dict | None] | None = None,
) -> dict:
    """One step of `rate` records/s for `duration` s. `source(rate, count)` starts the sender (the
    generator by default) and `progress_of()` reads the job's last batch (the speed layer's by default)."""
    count = int(rate * duration)
    start = source or generator_source(settings, run)
    read_progress = progress_of or (lambda: speed_progress(settings))
    samples, batches = [], {}
    first = lag.sample()
    started = time.time()
    background = start(rate, count)
    while background.thread.is_alive():
        s = lag.sample()
        s["t"] -= started
        samples.append(s)
        progress = read_progress()
        if progress and progress.get("batch_id") is not None and progress.get("timestamp", "") >= _iso(started):
            batches[progress["batch_id"]] = {k: progress.get(k) for k in BATCH_FIELDS}
        background.thread.join(timeout=1.0)
    background.join()
    produce_end = time.time()
    end_at_stop = lag.end_offsets()
    report = background.report
    drained_s = wait_drained(lag, end_at_stop, drain_timeout)
    progress = read_progress()
    if progress and progress.get("batch_id") is not None and progress.get("timestamp", "") >= _iso(started):
        batches[progress["batch_id"]] = {k: progress.get(k) for k in BATCH_FIELDS}
    elapsed = produce_end - started
    offered = report.rate if report else 0.0
    # The lag just after a commit (a trough of the saw-tooth) is what arrived while that batch
    # ran: it stays level when the speed layer keeps up and grows with each batch when it does not
    # (every batch then takes longer than the one before). The step's first commit may close a
    # batch planned before the step began: it is left out.
    commits = [b for a, b in zip(samples, samples[1:]) if b["committed"] != a["committed"]]
    troughs = [s["lag"] for s in commits[1:]]
    tolerance = offered * GROWTH_TOLERANCE_S
    reasons = []
    growth = None
    slope = least_squares_slope([(s["t"], s["lag"]) for s in commits[1:]])
    if len(troughs) >= 3 and slope is not None:
        # The trend of the troughs over the step (least squares: one slow batch, a GC pause or a
        # compaction on the shared machine, moves it little; a backlog that builds up moves it
        # with every batch), as the lag it adds over the step's duration.
        growth = round(slope * elapsed)
        if growth > tolerance:
            reasons.append(
                f"lag after commits grew by {growth:,} records over the step (trend; tolerance {tolerance:,.0f})"
            )
    else:
        reasons.append(f"only {len(commits)} batch(es) committed during the {elapsed:.0f}s step")
    if drained_s is None:
        reasons.append(f"backlog not processed within {drain_timeout:.0f}s of the step's end")
    reasons.extend(offer_shortfalls(rate, report))
    step_batches = list(batches.values())
    processed = [b["processed_rows_per_s"] for b in step_batches if b.get("processed_rows_per_s")]
    inputs = [b["input_rows_per_s"] for b in step_batches if b.get("input_rows_per_s")]
    timed = [b for b in step_batches if b.get("batch_ms") and b.get("input_rows") is not None]
    batch_ms = [b["batch_ms"] for b in timed]
    behind = [b["rows_behind"] for b in step_batches if b.get("rows_behind") is not None]
    # Records committed per second between the first and the last commit seen during the step.
    committed_rate = None
    if len(commits) >= 2 and commits[-1]["t"] > commits[0]["t"]:
        committed_rate = (commits[-1]["committed"] - commits[0]["committed"]) / (commits[-1]["t"] - commits[0]["t"])
    return {
        "target_rate": rate,
        "offered_rate": offered,
        "sent": report.sent if report else 0,
        "failed": report.failed if report else None,
        "produce_s": elapsed,
        "lag_start": first["lag"],
        "lag_end": samples[-1]["lag"] if samples else None,
        "lag_max": max((s["lag"] for s in samples), default=None),
        "lag_after_commits": troughs,
        "lag_after_first_commit": troughs[0] if troughs else None,
        "lag_after_last_commit": troughs[-1] if troughs else None,
        "lag_growth": growth,
        "lag_growth_tolerance": tolerance,
        "lag_slope_per_s": slope,
        "drained_after_s": drained_s,
        "sustained": not reasons,
        "not_sustained_because": reasons,
        "batches": len(step_batches),
        # Spark's processedRowsPerSecond over the step's batches: rows / busy time, and the median.
        "processed_rows_per_s": (sum(b["input_rows"] for b in timed) / (sum(batch_ms) / 1000)) if batch_ms else None,
        "processed_rows_per_s_median": statistics.median(processed) if processed else None,
        "input_rows_per_s_median": statistics.median(inputs) if inputs else None,
        "committed_rows_per_s": committed_rate,
        "batch_ms_median": statistics.median(batch_ms) if batch_ms else None,
        "batch_ms_max": max(batch_ms) if batch_ms else None,
        "rows_behind_max": max(behind) if behind else None,
        "rows_behind_last": behind[-1] if behind else None,
        "batch_samples": [(b["input_rows"], b["batch_ms"]) for b in timed],
        "time_per_1k_rows": time_breakdown(timed),
        "lag_samples": [(round(s["t"], 1), s["lag"]) for s in samples],
    }


OFFERED_SHARE = 0.95  # a step offered less than this share of its target rate did not test it


def offer_shortfalls(target_rate: float, report) -> list[str]:
    """Why a step's producer did not offer its target rate (a step the job kept up with but that was
    never sent its load, or whose sends failed, proves nothing): [] when it did."""
    if report is None:
        return ["the producer gave no report"]
    reasons = []
    if report.failed:
        reasons.append(f"{report.failed:,} sends failed")
    if report.rate < target_rate * OFFERED_SHARE:
        reasons.append(
            f"offered {report.rate:,.0f} records/s, under {OFFERED_SHARE:.0%} of the {target_rate:,.0f} targeted"
        )
    return reasons


def batch_cost_fit(steps: list[dict]) -> dict | None:
    """Least squares batch_ms = fixed + per_row * rows over every batch seen; 1/per_row bounds the rate."""
    points = [(rows, ms) for s in steps for rows, ms in s.get("batch_samples", []) if rows]
    if len(points) < 3 or len({r for r, _ in points}) < 2:
        return None
    try:
        fit = statistics.linear_regression([r for r, _ in points], [m for _, m in points])
    except statistics.StatisticsError:
        return None
    if fit.slope <= 0:
        return {"batches": len(points), "fixed_ms": fit.intercept, "per_row_ms": fit.slope, "ceiling_rows_per_s": None}
    return {
        "batches": len(points),
        "fixed_ms": fit.intercept,
        "per_row_ms": fit.slope,
        "ceiling_rows_per_s": 1000 / fit.slope,
    }


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def climb(rates: list[int], step_at: Callable[[int], dict]) -> list[dict]:
    """Run `step_at(rate)` for each rate in turn, logging each, until one is not sustained."""
    steps = []
    for rate in rates:
        log.info("rate step %d records/s", rate)
        step = step_at(rate)
        steps.append(step)
        log.info(
            "step %d/s: offered %.0f/s, processed %s/s (Spark), batches %s ms (median), lag after commits %s, "
            "drained after %s s: %s",
            rate,
            step["offered_rate"],
            fmt(step["processed_rows_per_s"]),
            fmt(step["batch_ms_median"]),
            step["lag_after_commits"],
            fmt(step["drained_after_s"], 1),
            "sustained" if step["sustained"] else "NOT sustained: " + "; ".join(step["not_sustained_because"]),
        )
        if not step["sustained"]:
            break
    return steps


def ladder_summary(rates: list[int], steps: list[dict]) -> dict:
    """The highest sustained rate of a climb, the first that was not, the rates not tried, the cost fit."""
    ok = [s for s in steps if s["sustained"]]
    return {
        "batch_cost_fit": batch_cost_fit(steps),
        "rates": rates,
        "highest_sustained_target_rate": max((s["target_rate"] for s in ok), default=None),
        "highest_sustained_offered_rate": max((s["offered_rate"] for s in ok), default=None),
        "first_unsustained_target_rate": next((s["target_rate"] for s in steps if not s["sustained"]), None),
        "not_run": [r for r in rates if r not in {s["target_rate"] for s in steps}],
        "steps": steps,
    }


def sustained_rates(
    settings: Settings,
    run: str,
    rates: list[int],
    duration: float,
    drain_timeout: float,
    source: Callable[[int, int], Any] | None = None,
) -> dict:
    """The ladder of `rates` into the speed layer, each step sent by `source(rate, count)` (the
    platform's generator by default)."""
    lag = LagProbe(settings)
    steps: list[dict] = []
    try:
        start_end = lag.end_offsets()
        settle = wait_drained(lag, start_end, drain_timeout)
        if settle is None:
            log.warning("the speed layer is still behind before the first step (lag %d)", lag.sample()["lag"])
        steps = climb(rates, lambda rate: rate_step(settings, lag, run, rate, duration, drain_timeout, source))
    finally:
        lag.close()
    return {
        **ladder_summary(rates, steps),
        "step_duration_s": duration,
        "trigger_s": settings.speed.trigger_s,
        "max_offsets_per_trigger": settings.speed.max_offsets_per_trigger,
    }
