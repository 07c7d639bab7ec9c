"""The batch job end to end on a large master dataset: a real `lambdactl batch` run, HBase load and
verification included, on the running stack.

The synthetic master dataset of bench/batch_recompute.py (`--size` records under `--data-dir`,
generated once) stands in for the master dataset; everything else is the job's own: a Spark
session of its own (a new JVM, as every run has), the de-duplication, every built-in view at every
granularity, the HBase load chosen by `batch.load` (HFiles on this machine's stack) and the
verification of every table. The run writes into the HBase namespace `--namespace` (created if
missing), not the platform's: it neither swaps nor disturbs what serves. Its tables are dropped
afterwards. Prints the run's seconds and where they went (from the job's own log lines).

    .venv/bin/python bench/batch_end_to_end.py --size 10000000 --runs 1 --json /tmp/batch_e2e.json

Needs the stack up (`lambdactl up`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

from batch_dataset import cutoff_ms, ensure_dataset  # bench/ itself: the scripts run as files
from batch_hbase_load import drop_table  # bench/ itself
from figures import configure_logging, emit, fmt  # bench/ itself

from batch_layer import job
from definitions.settings import Settings, get_settings
from definitions.settings_store import masked_inside
from stores import batch_bulk_load
from stores import batch_layout as layout
from stores.master import read_archived

log = logging.getLogger("bench.batch_e2e")

# The job's log lines that end a phase.
PLANNED = ": version "  # "run <id>: version N, cutoff ..., views ...": the session is up, the run recorded
DEDUPLICATED = "distinct events ingested before the cutoff"
WRITTEN = " cells written"  # "<view>/<granularity>: N cells written"


class Marks(logging.Handler):
    """When each of the job's log lines came, to split a run into its phases."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.monotonic(), record.getMessage()))


def bench_settings(settings: Settings, namespace: str) -> Settings:
    return settings.model_copy(update={"hbase": settings.hbase.model_copy(update={"namespace": namespace})})


def one_run(settings: Settings, url: str) -> dict:
    marks = Marks()
    job.log.addHandler(marks)
    started = time.monotonic()  # before the session starts: its JVM is part of a run
    try:
        with mock.patch.object(job, "read_master", lambda spark, _settings: read_archived(spark, url)):
            result = job.run_batch(settings, cutoff_ms=cutoff_ms(), force=True, swap=False)
    finally:
        job.log.removeHandler(marks)
    seconds = time.monotonic() - started
    planned_at = next((t for t, line in marks.lines if PLANNED in line), started)
    dedup_at = next((t for t, line in marks.lines if DEDUPLICATED in line), planned_at)
    views: dict[str, float] = {}  # computing and writing each view's granularities (its group's, shared)
    previous = dedup_at
    for t, line in marks.lines:
        if line.endswith(WRITTEN):
            name = line.split("/", 1)[0]
            views[name] = views.get(name, 0.0) + t - previous
            previous = t
    try:
        return {
            "seconds": seconds,
            "job_seconds": result.seconds,
            "session_s": planned_at - started,
            "deduplication_s": dedup_at - planned_at,
            "views_written_s": views,
            "last_verification_s": seconds - (previous - started),
            "events": result.events,
            "cells": sum(t.cells for t in result.tables.values()),
            "version": result.version,
            "load": batch_bulk_load.chosen_load(settings),
        }
    finally:
        for name in result.tables:
            drop_table(settings, layout.table_name(name, result.version))


def report(result: dict) -> str:
    run = sorted(result["runs"], key=lambda r: r["seconds"])[len(result["runs"]) // 2]  # the median one
    lines = [
        f"Batch end to end ({result['records']:,} master records, load {run['load']}, driver "
        f"{result['driver_memory']} {result['jvm_options']}, "
        f"median of {len(result['runs'])} run(s)): {fmt(result['seconds'], 1)} s",
        f"  one run's phases ({fmt(run['seconds'], 1)} s):",
        f"    session start, plan, run recorded: {fmt(run['session_s'], 1)} s",
        f"    read, de-duplicate, cache: {fmt(run['deduplication_s'], 1)} s",
    ]
    for name, seconds in run["views_written_s"].items():
        lines.append(f"    {name}: computed and loaded in {fmt(seconds, 1)} s (earlier tables verified meanwhile)")
    lines.append(f"    waiting for the last verifications: {fmt(run['last_verification_s'], 1)} s")
    lines.append(
        f"  {run['events']:,} distinct events, {run['cells']:,} cells; runs "
        f"{', '.join(fmt(r['seconds'], 1) for r in result['runs'])} s; 1-min load average {result['load_average_1m']}"
    )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000_000, help="master records")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/lambda-bench-batch"))
    parser.add_argument("--namespace", default="lambda_bench", help="the HBase namespace the runs write into")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--step", choices=("dataset", "run"), help=argparse.SUPPRESS)  # what a child process does
    args = parser.parse_args()
    configure_logging()
    settings = bench_settings(get_settings(), args.namespace)
    if args.step == "dataset":
        from definitions.spark import spark_session

        spark = spark_session(settings, "lambda-bench-dataset", {"spark.driver.memory": settings.batch.driver_memory})
        try:
            print(ensure_dataset(spark, args.data_dir, args.size))
        finally:
            spark.stop()
        return 0
    if args.step == "run":
        print(json.dumps(one_run(settings, (args.data_dir / str(args.size)).resolve().as_uri())))
        return 0

    from infra.bootstrap import ensure_hbase_meta

    ensure_hbase_meta(settings)
    # Each step in a process of its own: a run starts its own JVM, with the bulk load's class path,
    # as `lambdactl batch` does.
    child = [sys.executable, __file__, *sys.argv[1:]]
    subprocess.run([*child, "--step", "dataset"], check=True, stdout=subprocess.DEVNULL)
    loads, runs = [os.getloadavg()[0]], []
    for i in range(args.runs):
        done = subprocess.run([*child, "--step", "run"], check=True, stdout=subprocess.PIPE, text=True)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        loads.append(os.getloadavg()[0])
        log.info("run %d: %.1fs", i + 1, runs[-1]["seconds"])
    result = {
        "records": args.size,
        "driver_memory": settings.batch.driver_memory,
        "jvm_options": masked_inside(settings.batch.jvm_options),  # written to the results, then the README
        "seconds": statistics.median(r["seconds"] for r in runs),
        "runs": runs,
        "load_average_1m": [round(x, 1) for x in loads],
    }
    emit(result, report(result), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
