"""What the speed layer's de-duplication costs a micro-batch as the ids its window holds grow: Spark's
dropDuplicatesWithinWatermark (a new checkpoint's by default) against the event-time timers
(speed_layer/jvm/FirstCopyWithinWindow.java); `speed.dedupe_operator` chooses (speed_layer.first_copies).

Each operator in turn runs a stream of `--rate` distinct ids per second (Spark's rate source, two
partitions, a 1 s trigger, the RocksDB state store with changelog checkpointing, as the speed layer)
for `--duration` s, with a window longer than that, so the state only grows (or `--window` s, so
ids expire once the state holds about two windows of them). With `--jump`, the ids after the run's
`--duration` come with ingest times two windows plus the run later, as after a catch-up or a quiet spell
longer than the window: the watermark passes every id held at once, and the micro-batch that forgets
them is timed on its own. From every micro-batch's
progress: the ids held, the batch's duration and the operator's own time (updates, removals, commit).
Prints, per operator, the median batch and operator time over the first and the last third of the
run and the least-squares slope of the operator's time per million ids held.

    .venv/bin/python bench/dedupe_state_cost.py --rate 20000 --duration 120
    .venv/bin/python bench/dedupe_state_cost.py --rate 20000 --duration 150 --jump

Needs no running service (a local Spark session from settings; checkpoints in a temporary folder).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from figures import emit, fmt  # noqa: E402  (bench/ itself)
from rate_ladder import least_squares_slope  # noqa: E402  (bench/ itself)

from definitions.layer_settings import SpeedSettings  # noqa: E402
from definitions.settings import get_settings  # noqa: E402
from definitions.spark import spark_session  # noqa: E402
from speed_layer.first_copies import first_copies_within_window  # noqa: E402
from speed_layer.job import STATE_STORE_OPTIONS  # noqa: E402
from stores.checkpoints import DEDUPE_SCAN, DEDUPE_TIMERS  # noqa: E402

# How long a run with --jump may wait for the micro-batch that forgets every id held.
JUMP_TIMEOUT_S = 900.0


def run(spark, settings, dedupe: str, rate: int, duration: float, folder: Path, jump: bool = False) -> list[dict]:
    from pyspark.sql import functions as F

    # Ids from `duration` on: the watermark (their time - window) passes every held id's time + window.
    shift = 2 * settings.speed.dedupe_window_s + int(duration) + 60
    jump_at = int(rate * duration) if jump else None
    events = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", rate)
        .option("numPartitions", 2)
        .load()
        .select(
            F.lit(None).cast("string").alias("reason"),  # every one valid
            F.col("value").cast("string").alias("event_id"),
            (
                F.col("timestamp")
                if jump_at is None
                else F.when(
                    F.col("value") >= jump_at, F.col("timestamp") + F.expr(f"INTERVAL {shift} SECONDS")
                ).otherwise(F.col("timestamp"))
            ).alias("ingest_time"),
            F.spark_partition_id().alias("kafka_partition"),  # the order of copies (none here)
            F.col("value").alias("kafka_offset"),
        )
    )
    query = (
        first_copies_within_window(events, settings, dedupe)
        .writeStream.format("noop")
        .option("checkpointLocation", (folder / dedupe).as_uri())
        .trigger(processingTime="1 second")
        .start()
    )
    batches: dict[int, dict] = {}
    # RocksDB does not count its rows (speed_layer.job.STATE_STORE_OPTIONS): the ids held after each
    # micro-batch (every one, with input or not) follow from those each added and forgot.
    held: dict[int, int] = {}
    started = time.monotonic()
    try:
        while time.monotonic() - started < duration + (JUMP_TIMEOUT_S if jump else 0):
            if jump and any(b["removed"] and b["removed"] >= 0.9 * b["held_before"] for b in batches.values()):
                break  # the micro-batch that forgot (nearly) every id held has committed
            time.sleep(0.5)
            for p in query.recentProgress:
                if p.batchId in held or not p.stateOperators:
                    continue
                op = p.stateOperators[0]
                before = held.get(p.batchId - 1, 0)
                held[p.batchId] = before + int(op.numRowsUpdated) - int(op.numRowsRemoved)
                if not p.numInputRows:
                    continue
                batches[p.batchId] = {
                    "held": held[p.batchId],
                    "held_before": before,
                    "removed": int(op.numRowsRemoved),
                    "rows": int(p.numInputRows),
                    "batch_ms": int(p.durationMs.get("triggerExecution", 0)),
                    "operator_ms": int(op.allUpdatesTimeMs) + int(op.allRemovalsTimeMs) + int(op.commitTimeMs),
                }
    finally:
        spark.sparkContext.setLogLevel("FATAL")  # the stop interrupts tasks mid-commit, which log errors
        query.stop()
        spark.sparkContext.setLogLevel("WARN")
    return [batches[k] for k in sorted(batches)][1:]  # the first micro-batch starts the JVM's code paths


def jump_of(batches: list[dict]) -> tuple[list[dict], dict | None]:
    """The batches before the jump, and the micro-batch that forgot the most ids (None: none forgot any)."""
    jumped = max(batches, key=lambda b: b["removed"], default=None)
    if jumped is None or not jumped["removed"]:
        return batches, None
    return batches[: batches.index(jumped)], {
        k: jumped[k] for k in ("held_before", "removed", "batch_ms", "operator_ms")
    }


def summary(batches: list[dict]) -> dict:
    third = max(1, len(batches) // 3)
    first, last = batches[:third], batches[-third:]
    slope = least_squares_slope([(b["held"] / 1e6, b["operator_ms"]) for b in batches])
    return {
        "micro_batches": len(batches),
        "held_at_end": batches[-1]["held"] if batches else None,
        "rows_per_batch_median": statistics.median(b["rows"] for b in batches) if batches else None,
        "batch_ms_first_third": statistics.median(b["batch_ms"] for b in first) if batches else None,
        "batch_ms_last_third": statistics.median(b["batch_ms"] for b in last) if batches else None,
        "operator_ms_first_third": statistics.median(b["operator_ms"] for b in first) if batches else None,
        "operator_ms_last_third": statistics.median(b["operator_ms"] for b in last) if batches else None,
        "operator_ms_per_million_held": None if slope is None else round(slope, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=20_000, help="distinct ids per second")
    parser.add_argument("--duration", type=float, default=120.0, help="seconds each operator runs")
    parser.add_argument("--window", type=int, help="seconds (default: longer than the run, nothing expires)")
    parser.add_argument(
        "--jump", action="store_true", help="then move ingest time past every id held and time that micro-batch"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.rate <= 0 or args.duration < 10:
        parser.error("--rate must be positive and --duration at least 10 s")
    window_s = args.window or int(args.duration * 2) + 60  # by default nothing expires: the state only grows
    if window_s <= 0:
        parser.error("--window must be positive")
    settings = get_settings()
    settings = settings.model_copy(update={"speed": SpeedSettings(dedupe_window_s=window_s)})
    spark = spark_session(
        settings,
        "bench-dedupe-state-cost",
        {
            "spark.sql.shuffle.partitions": "2",
            **STATE_STORE_OPTIONS,
        },
    )
    result: dict = {"rate": args.rate, "duration_s": args.duration, "window_s": window_s, "operators": {}}
    try:
        with tempfile.TemporaryDirectory(prefix="lambda-bench-dedupe-") as folder:
            for dedupe in (DEDUPE_SCAN, DEDUPE_TIMERS):
                batches = run(spark, settings, dedupe, args.rate, args.duration, Path(folder), args.jump)
                before, jumped = jump_of(batches) if args.jump else (batches, None)
                result["operators"][dedupe] = summary(before) | ({"jump": jumped} if args.jump else {})
    finally:
        spark.stop()
    lines = [f"de-duplication at {args.rate:,} distinct ids/s for {args.duration:.0f} s each (window {window_s} s):"]
    for dedupe, s in result["operators"].items():
        lines.append(
            f"  {dedupe:>22}: {s['micro_batches']} micro-batches of ~{fmt(s['rows_per_batch_median'])} rows, "
            f"{fmt(s['held_at_end'])} ids held at the end; batch median {fmt(s['batch_ms_first_third'])} -> "
            f"{fmt(s['batch_ms_last_third'])} ms (first -> last third), operator {fmt(s['operator_ms_first_third'])} "
            f"-> {fmt(s['operator_ms_last_third'])} ms, {fmt(s['operator_ms_per_million_held'], 1)} ms more per "
            "million ids held"
        )
        if args.jump:
            j = s["jump"]
            lines.append(
                f"  {'':>22}  the watermark past every id held: "
                + (
                    f"{fmt(j['removed'])} of {fmt(j['held_before'])} forgotten in one micro-batch of "
                    f"{fmt(j['batch_ms'])} ms (operator {fmt(j['operator_ms'])} ms)"
                    if j
                    else "no micro-batch forgot any id (not measured)"
                )
            )
    emit(result, "\n".join(lines) + "\n", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
