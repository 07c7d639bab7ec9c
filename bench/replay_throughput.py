"""Kappa-style replay throughput, and the time to compute an added view's history.

1. Replay (needs the running stack): makes sure topic `events` holds at least `--records` records
   after a start time (sending generated ones at full speed when it does not), then runs
   `lambdactl replay --view V --from <that time> --json` `--runs` times and reports the Kafka records
   per second the replay's Spark job read, aggregated and wrote, and the command's wall time
   (Spark's start and the deletion included). Median of the runs.
2. Added view (no service): the batch layer's computation of one view (`--added-view`) over the
   synthetic master dataset of bench/batch_dataset.py with `--history` records: de-duplication, then
   the view at every granularity, as `lambdactl views apply` has it run (HBase writes not included;
   bench/batch_recompute.py measures those). Median of `--runs`.

    .venv/bin/python bench/replay_throughput.py --records 1000000 --history 10000000 --json /tmp/replay.json
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import time
from pathlib import Path

from batch_dataset import ensure_dataset  # bench/ itself: the scripts run as files
from batch_engines import spark_events  # bench/ itself
from figures import emit, fmt  # bench/ itself

from definitions.settings import get_settings
from definitions.times import iso_ms
from definitions.views import BUILT_IN
from ingest.generator import GeneratorConfig, produce
from stores.kafka import spans_from

log = logging.getLogger("bench.replay")


def records_since(settings, from_ms: int) -> int:
    return sum(s.end - s.start for s in spans_from(settings, from_ms))


def replay_runs(settings, view: str, records: int, runs: int) -> dict:
    from_ms = int(time.time() * 1000) - 86_400_000
    held = records_since(settings, from_ms)
    if held < records:
        log.info("topic holds %d records from %s; sending %d more", held, iso_ms(from_ms), records - held)
        report = produce(settings, GeneratorConfig(seed=7, count=records - held))
        log.info("sent %d records at %.0f/s", report.sent, report.rate)
    out = []
    for run in range(runs):
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "lambdactl.cli", "replay", "--view", view, "--from", iso_ms(from_ms), "--json"],
            capture_output=True,
            text=True,
            timeout=3_600,
        )
        if done.returncode != 0:
            raise SystemExit(f"replay failed: {done.stderr[-2000:]}")
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        summary["wall_seconds"] = time.monotonic() - started
        log.info("run %d: %s", run + 1, summary)
        out.append(summary)
    return {
        "view": view,
        "records": statistics.median(r["records"] for r in out),
        "records_per_s": statistics.median(r["records_per_s"] for r in out),
        "job_seconds": statistics.median(r["seconds"] for r in out),
        "wall_seconds": statistics.median(r["wall_seconds"] for r in out),
        "rows_written": statistics.median(r["rows_written"] for r in out),
        "runs": out,
    }


def added_view_runs(settings, view_name: str, history: int, runs: int, data_dir: Path, driver_memory: str) -> dict:
    from definitions.spark import spark_session
    from stores.batch_writer import computed_stats

    spark = spark_session(settings, "bench-added-view", {"spark.driver.memory": driver_memory})
    try:
        url = ensure_dataset(spark, data_dir, history)
        view = BUILT_IN[view_name]
        seconds = []
        for _ in range(runs):
            started = time.monotonic()
            events, distinct = spark_events(spark, settings, url)
            try:
                for granularity in view.granularities:
                    computed_stats(view, view.compute(events, granularity))
            finally:
                events.unpersist(blocking=True)
            seconds.append(time.monotonic() - started)
        return {"view": view_name, "history": history, "events": distinct, "seconds": statistics.median(seconds)}
    finally:
        spark.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="Kafka records to replay; 0 skips the replay")
    parser.add_argument("--view", default="page_views", help="the view replayed")
    parser.add_argument("--history", type=int, default=10_000_000, help="master records; 0 skips the added view")
    parser.add_argument("--added-view", default="page_views_by_channel")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/lambda-bench-batch"))
    parser.add_argument("--driver-memory", default="3g")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = get_settings()
    result: dict = {}
    lines = []
    if args.records:
        r = result["replay"] = replay_runs(settings, args.view, args.records, args.runs)
        lines.append(
            f"replay of {r['view']}: {fmt(r['records'])} records, {fmt(r['records_per_s'])} records/s in the job "
            f"({fmt(r['job_seconds'], 1)} s), {fmt(r['wall_seconds'], 1)} s for the whole command (median of {args.runs})"
        )
    if args.history:
        a = result["added_view"] = added_view_runs(
            settings, args.added_view, args.history, args.runs, args.data_dir, args.driver_memory
        )
        lines.append(
            f"history of an added view ({a['view']}) over {fmt(a['history'])} master records: "
            f"{fmt(a['seconds'], 1)} s (de-duplication + its granularities, median of {args.runs})"
        )
    emit(result, "\n".join(lines), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
