"""Kappa-style replay throughput, and the time to compute an added view's history.

1. Replay (needs the running stack): makes sure topic `events` holds at least `--records` records
   after a start time (sending generated ones at full speed when it does not), then runs
   `lambdactl replay --view V --from <that time> --json` `--runs` times and reports the Kafka records
   per second the replay's Spark job read, aggregated and wrote, and the command's wall time
   (Spark's start and the deletion included). Median of the runs.
2. Added view: the batch layer's computation of one view (`--added-view`) over the synthetic master
   dataset of bench/batch_dataset.py with `--history` records: de-duplication, then the view at every
   granularity, as `lambdactl views apply` has it run. With `--on-hdfs` (needs HDFS) the dataset is
   read from a copy on the stack's HDFS (made once, under /bench), as the batch layer reads the
   master dataset; with `--load` (needs HBase) every granularity is also written into a fresh HBase
   table through the batch layer's writer and verified (the table is dropped after). Median of
   `--runs`.

    .venv/bin/python bench/replay_throughput.py --records 1000000 --history 10000000 --json /tmp/replay.json
    .venv/bin/python bench/replay_throughput.py --records 0 --history 10000000 --on-hdfs --load --runs 2
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from batch_dataset import ensure_dataset  # bench/ itself: the scripts run as files
from batch_engines import cached_stats, spark_events  # bench/ itself
from figures import configure_logging, emit, fmt  # bench/ itself

from definitions.settings import get_settings
from definitions.times import iso_ms
from definitions.view_rollup import compute_each
from definitions.views import BUILT_IN
from ingest.generator import GeneratorConfig, produce
from stores.kafka import spans_from

log = logging.getLogger("bench.replay")


def records_since(settings, from_ms: int) -> int:
    return sum(s.end - s.start for s in spans_from(settings, from_ms))


REPLAY_TIMEOUT_S = 3_600


def _replay(args: list[str]) -> tuple[str, str, int]:
    """Run `lambdactl replay ARGS --json`. Stopped (its timeout, or this program interrupted), it is
    interrupted as Ctrl-C would and given time to stop its Spark job and say, in the error raised
    here, what it left (the view stays claimed: `lambdactl replay --view V --resume` or `--cancel`);
    a kill said nothing."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "lambdactl.cli", "replay", *args, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=REPLAY_TIMEOUT_S)
    except BaseException as exc:  # the timeout, or this program's own Ctrl-C
        if isinstance(exc, subprocess.TimeoutExpired):  # a Ctrl-C at a terminal reached it already
            proc.send_signal(signal.SIGINT)
        try:
            said = proc.communicate(timeout=300)[1] or ""
        except subprocess.TimeoutExpired:
            said = "it did not stop within 300 s: killed"
        finally:
            proc.kill()
        raise SystemExit(f"replay stopped: {said.strip()[-2000:]}") from exc
    return stdout, stderr, proc.returncode


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
        stdout, stderr, code = _replay(["--view", view, "--from", iso_ms(from_ms)])
        if code != 0:
            raise SystemExit(f"replay failed: {stderr[-2000:]}")
        summary = json.loads(stdout.strip().splitlines()[-1])
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


def on_hdfs(spark, settings, local_url: str, rows: int) -> str:
    """A copy of the local dataset on the stack's HDFS (made unless one with `rows` rows is there)."""
    from stores.master import read_archived

    url = f"{settings.hdfs.url}/bench/master-{rows}"
    try:
        if read_archived(spark, url).count() == rows:
            log.info("reusing %s", url)
            return url
    except Exception as exc:  # noqa: BLE001 - not there yet
        log.info("no copy at %s yet (%s)", url, type(exc).__name__)
    started = time.monotonic()
    local = spark.read.parquet(local_url)
    local.write.mode("overwrite").partitionBy("ingest_date", "ingest_hour").parquet(url)
    log.info("copied %d rows to %s in %.1fs", rows, url, time.monotonic() - started)
    return url


def added_view_runs(
    settings,
    view_name: str,
    history: int,
    runs: int,
    data_dir: Path,
    driver_memory: str,
    hdfs: bool = False,
    load: bool = False,
) -> dict:
    from batch_hbase_load import load_view  # bench/ itself

    from definitions.spark import spark_session

    options = {"spark.driver.memory": driver_memory}
    from stores.batch_bulk_load import chosen_load, session_options

    bulk = load and chosen_load(settings) == "bulk"  # loaded as the batch job would load it
    if bulk:
        options.update(session_options(settings))
    spark = spark_session(settings, "bench-added-view", options)
    try:
        url = ensure_dataset(spark, data_dir, history)
        if hdfs:
            url = on_hdfs(spark, settings, url, history)
        view = BUILT_IN[view_name]
        seconds, load_seconds, cells = [], [], 0
        for run in range(runs):
            started = time.monotonic()
            events, distinct = spark_events(spark, settings, url, [view])  # a run adding it reads its columns
            try:
                if load:
                    # Each granularity taken while compute_each's cache lives, as the job's writers take them.
                    computed = {(view.name, g): f.localCheckpoint(eager=True) for g, f in compute_each(view, events)}
                    loaded = load_view(
                        settings, f"bench_added_{run}", view, computed, verify=True, bulk_spark=spark if bulk else None
                    )
                    cells = loaded["cells"]
                    load_seconds.append(loaded["seconds"])
                else:
                    for _, frame in compute_each(view, events):
                        cached_stats(view, frame)
            finally:
                events.unpersist(blocking=True)
            seconds.append(time.monotonic() - started)
            log.info("added view run %d: %.1f s%s", run + 1, seconds[-1], f" ({cells} cells loaded)" if load else "")
        out = {
            "view": view_name,
            "history": history,
            "events": distinct,
            "source": "hdfs" if hdfs else "local",
            "seconds": statistics.median(seconds),
        }
        if load:
            out.update(cells=cells, load_seconds=statistics.median(load_seconds), load="bulk" if bulk else "puts")
        return out
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
    parser.add_argument("--on-hdfs", action="store_true", help="read the history from a copy on the stack's HDFS")
    parser.add_argument("--load", action="store_true", help="write the added view into HBase too (the stack's)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure_logging()
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
            settings,
            args.added_view,
            args.history,
            args.runs,
            args.data_dir,
            args.driver_memory,
            hdfs=args.on_hdfs,
            load=args.load,
        )
        loaded = f"; {fmt(a['cells'])} cells into HBase in {fmt(a['load_seconds'], 1)} s of it" if args.load else ""
        lines.append(
            f"history of an added view ({a['view']}) over {fmt(a['history'])} master records read from "
            f"{a['source']}: {fmt(a['seconds'], 1)} s (de-duplication + its granularities{loaded}, median of {args.runs})"
        )
    emit(result, "\n".join(lines), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
