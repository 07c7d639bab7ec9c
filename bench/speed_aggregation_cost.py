"""What the speed layer's micro-batch costs without Kafka or Cassandra, two ways in turn: with its own
session options for the aggregation (speed_layer.job.AGGREGATION_OPTIONS) and with Spark's defaults
(`--compare options`), or with the cells of views that have the same ones aggregated once, as a new
checkpoint does, and per view, as a checkpoint made before (`--compare cells`;
definitions.views.cell_groups), or every view in the one query the speed layer runs and each view in a
streaming query of its own, all running at once in one Spark application (`--compare queries`: what a
query per view would cost; each reads and de-duplicates every event, and without Kafka here the
repeated read and validation are left out, so the figure understates that cost).

Each run streams `--rows` synthetic events per micro-batch (Spark's rate-micro-batch source, two
partitions, ingest time advancing `--advance-ms` per batch; 1,000 URLs, 50,000 users, 70 % page
views) through the speed layer's own `cells_by_ingest_bucket` (the de-duplication a new checkpoint
runs, every built-in view's cells, the stateful aggregation on RocksDB with changelog checkpointing)
into a sink that discards them, micro-batches back to back, for `--duration` s. Prints each run's
median micro-batch time over its last two thirds, and the ratio (with queries of their own: the
slowest query's median, the one that bounds the rate all of them keep up with). `--pairs` alternates the two
settings that many times (the machine is shared: compare medians of pairs run one after the other).

    .venv/bin/python bench/speed_aggregation_cost.py --rows 60000 --duration 150 --pairs 2 [--compare cells]

Needs no running service (a local Spark session from settings; checkpoints in a temporary folder).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from figures import emit, fmt  # noqa: E402  (bench/ itself)

from definitions.settings import get_settings  # noqa: E402
from definitions.spark import spark_session  # noqa: E402
from definitions.views import BUILT_IN  # noqa: E402
from speed_layer.job import AGGREGATION_OPTIONS, STATE_STORE_OPTIONS, cells_by_ingest_bucket  # noqa: E402
from stores.checkpoints import DEDUPE_SCAN  # noqa: E402

SPARK_DEFAULTS = {"spark.sql.objectHashAggregate.sortBased.fallbackThreshold": "128"}


def events(spark, rows: int, advance_ms: int):
    from pyspark.sql import functions as F

    source = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows)
        .option("numPartitions", 2)
        .option("advanceMillisPerBatch", advance_ms)
        .option("startTimestamp", int(time.time() * 1000))
        .load()
    )
    v = F.col("value")
    return source.select(
        v.cast("string").alias("event_id"),
        F.col("timestamp").alias("event_time"),
        F.concat(F.lit("u-"), (v * 7919 % 50_000).cast("string")).alias("user_id"),
        F.concat(F.lit("/p/"), (v * 31 % 1_000).cast("string")).alias("url"),
        F.when(v % 10 < 7, "page_view").otherwise("click").alias("event_type"),
        F.lit(None).cast("string").alias("referrer"),
        F.element_at(F.array(*map(F.lit, ["DE", "FR", "US", "GB", "ES"])), (v % 5 + 1).cast("int")).alias("country"),
        F.element_at(F.array(*map(F.lit, ["desktop", "mobile", "tablet"])), (v % 3 + 1).cast("int")).alias("device"),
        F.lit(2).alias("schema_version"),
        F.lit("web").alias("channel"),
        F.col("timestamp").alias("ingest_time"),
        F.spark_partition_id().alias("kafka_partition"),
        v.alias("kafka_offset"),
        F.lit(None).cast("string").alias("reason"),
    )


# Each comparison: its two setups, (session options, shared cells, a query per view) by name; the ratio
# is the second's median over the first's.
COMPARISONS = {
    "options": {"speed layer": (AGGREGATION_OPTIONS, True, False), "Spark defaults": (SPARK_DEFAULTS, True, False)},
    "cells": {
        "shared cells": (AGGREGATION_OPTIONS, True, False),
        "cells per view": (AGGREGATION_OPTIONS, False, False),
    },
    "queries": {"one query": (AGGREGATION_OPTIONS, True, False), "query per view": (AGGREGATION_OPTIONS, True, True)},
}


def run(
    spark, settings, setup: tuple[dict[str, str], bool, bool], rows: int, advance_ms: int, duration: float, folder: Path
) -> list[list]:
    """The (input rows, batch ms) of every micro-batch of each query of one run with `setup`: session
    options, whether cells are shared, and whether each view has a query of its own (all at once)."""
    options, shared, per_view = setup
    for key, value in options.items():
        spark.conf.set(key, value)
    groups = [[view] for view in BUILT_IN] if per_view else [list(BUILT_IN)]
    queries = []
    for number, views in enumerate(groups):
        cells = cells_by_ingest_bucket(
            events(spark, rows, advance_ms), views, settings, dedupe=DEDUPE_SCAN, shared=shared
        )
        writer = cells.writeStream.outputMode("update").format("noop")
        writer = writer.option("checkpointLocation", (folder / str(number)).as_uri()).trigger(
            processingTime="0 seconds"
        )
        queries.append(writer.start())
    seen: list[dict[int, tuple[int, int]]] = [{} for _ in queries]
    started = time.monotonic()
    try:
        while time.monotonic() - started < duration:
            time.sleep(1)
            for query, batches in zip(queries, seen, strict=True):
                for p in query.recentProgress:
                    if p.numInputRows:
                        batches[p.batchId] = (int(p.numInputRows), int(p.durationMs.get("triggerExecution", 0)))
    finally:
        spark.sparkContext.setLogLevel("FATAL")  # the stop interrupts tasks mid-commit, which log errors
        for query in queries:
            query.stop()
        spark.sparkContext.setLogLevel("WARN")
    return [[batches[k] for k in sorted(batches)] for batches in seen]


def median_batch_ms(batches: list) -> float | None:
    """The median micro-batch time over the last two thirds of a run (the first third warms it up)."""
    kept = batches[len(batches) // 3 :]
    return statistics.median(ms for _, ms in kept) if kept else None


def slowest_median_ms(queries: list[list]) -> float | None:
    """The highest of the queries' median micro-batch times: every query reads every event, so the
    slowest one bounds the input rate they all keep up with."""
    medians = [median_batch_ms(batches) for batches in queries]
    return None if not medians or None in medians else max(m for m in medians if m is not None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=60_000, help="events per micro-batch")
    parser.add_argument("--advance-ms", type=int, default=4_000, help="ingest time between micro-batches")
    parser.add_argument("--duration", type=float, default=150.0, help="seconds each run streams")
    parser.add_argument("--pairs", type=int, default=1, help="runs of each setting, alternated")
    parser.add_argument(
        "--compare", choices=sorted(COMPARISONS), default="options", help="what the two setups differ in"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.rows <= 0 or args.advance_ms <= 0 or args.duration < 30 or args.pairs < 1:
        parser.error("--rows and --advance-ms must be positive, --duration at least 30 s, --pairs at least 1")
    settings = get_settings()
    window_s = settings.speed.dedupe_window_s
    spark = spark_session(
        settings,
        "bench-speed-aggregation-cost",
        {
            "spark.driver.memory": settings.speed.driver_memory,
            "spark.sql.shuffle.partitions": str(settings.speed.shuffle_partitions),
            **STATE_STORE_OPTIONS,
        },
    )
    setups = COMPARISONS[args.compare]
    result: dict = {
        "compare": args.compare,
        "rows_per_batch": args.rows,
        "window_s": window_s,
        "runs": {name: [] for name in setups},
    }
    folder = Path(tempfile.mkdtemp(prefix="lambda-bench-speed-agg-"))
    try:
        for pair in range(args.pairs):
            for number, (name, setup) in enumerate(setups.items()):
                checkpoint = folder / f"{pair}-{number}"
                queries = run(spark, settings, setup, args.rows, args.advance_ms, args.duration, checkpoint)
                result["runs"][name].append(
                    {"micro_batches": sum(map(len, queries)), "median_batch_ms": slowest_median_ms(queries)}
                )
    finally:
        spark.stop()  # until then, the stopped queries' state stores may still write into their checkpoints
        shutil.rmtree(folder, ignore_errors=True)
    lines = [f"speed-layer micro-batches of {args.rows:,} events ({args.duration:.0f} s a run, window {window_s} s):"]
    medians = {}
    for name, runs in result["runs"].items():
        figures = [r["median_batch_ms"] for r in runs if r["median_batch_ms"] is not None]
        medians[name] = statistics.median(figures) if figures else None
        lines.append(
            f"  {name:>15}: median batch {', '.join(fmt(f) for f in figures)} ms ({', '.join(str(r['micro_batches']) for r in runs)} micro-batches)"
        )
    first, second = setups
    result["ratio"] = round(medians[second] / medians[first], 3) if medians[first] and medians[second] else None
    lines.append(f"  {second} / {first}: {fmt(result['ratio'], 2)}x")
    emit(result, "\n".join(lines) + "\n", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
