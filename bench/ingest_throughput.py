"""Generator send rate and archiver throughput on this machine.

1. Generator: sends `--gen-count` records to a fresh topic, `--runs` times; median records/s
   (batched asynchronous kafka-python sends, the record of what was sent kept in memory).
2. Archiver: pre-loads a fresh topic with `--arch-count` records (5 % invalid), then runs a
   separate archiver process on it (its own master path, checkpoints and state dir) and times
   the drain: from the first micro-batch until the completeness marker covers every record.
   Reports events/s into HDFS. The stack's own archiver is stopped meanwhile (2 cores).

    .venv/bin/python bench/ingest_throughput.py --runs 3 --gen-count 100000 --arch-count 300000

Needs the stack up (`lambdactl up`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from figures import configure_logging  # bench/ itself: the scripts run as files
from kafka.admin import NewTopic

from definitions.settings import Settings, get_settings
from infra.stack import Stack
from ingest.generator import GeneratorConfig, produce
from stores import completeness
from stores.clients import kafka_admin
from stores.webhdfs import WebHdfs

log = logging.getLogger("bench.ingest")


def make_topic(settings: Settings, name: str) -> None:
    admin = kafka_admin(settings)
    try:
        admin.create_topics(
            [NewTopic(name, settings.kafka.partitions, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})]
        )
    finally:
        admin.close()


def drop_topic(settings: Settings, name: str) -> None:
    admin = kafka_admin(settings)
    try:
        admin.delete_topics([name])
    except Exception as exc:  # best effort clean-up
        log.warning("could not delete topic %s: %s", name, exc)
    finally:
        admin.close()


def generator_rate(settings: Settings, count: int, runs: int) -> list[float]:
    rates = []
    for i in range(runs):
        topic = f"bench-gen-{int(time.time())}-{i}"
        make_topic(settings, topic)
        try:
            sink = io.StringIO()
            report = produce(settings, GeneratorConfig(seed=i, count=count, topic=topic), sink)
        finally:  # a run that fails leaves no topic behind
            drop_topic(settings, topic)
        rates.append(report.rate)
        log.info("generator run %d: %d records in %.1fs = %.0f/s", i + 1, report.sent, report.seconds, report.rate)
    return rates


@contextlib.contextmanager
def separate_archiver(
    settings: Settings, name: str, preload: Callable[[str], None] | None = None
) -> Iterator[tuple[Settings, Path]]:
    """An archiver process of its own on fresh topics `<name>` and `<name>.dlq`, with its own master
    path, checkpoints and state dir: (its settings, its progress file). `preload(topic)` runs before
    the process starts. Everything is removed after."""
    stamp = int(time.time())
    topic = f"{name}-{stamp}"
    dlq = f"{topic}.dlq"
    root = f"/lambda/bench/{name}-{stamp}"
    make_topic(settings, topic)
    make_topic(settings, dlq)
    with tempfile.TemporaryDirectory(prefix="lambda-bench-") as state:
        paths = {
            "master_path": f"{root}/master",
            "completeness_path": f"{root}/completeness",
            "checkpoint_dir": f"{root}/checkpoints",
        }
        env = dict(
            os.environ,
            LAMBDA_STATE_DIR=state,
            LAMBDA_KAFKA__EVENTS_TOPIC=topic,
            LAMBDA_KAFKA__DLQ_TOPIC=dlq,
            **{f"LAMBDA_ARCHIVER__{key.upper()}": value for key, value in paths.items()},
        )
        bench_settings = Settings(
            state_dir=Path(state),
            kafka={**settings.kafka.model_dump(), "events_topic": topic, "dlq_topic": dlq},
            archiver={**settings.archiver.model_dump(), **paths},
        )
        proc = None
        try:
            if preload is not None:
                preload(topic)
            proc = subprocess.Popen(
                [sys.executable, "-m", "ingest.archiver"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            yield bench_settings, Path(state) / "run" / "archiver.progress.json"
        finally:
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)  # its own session: the JVM goes with it
                    proc.wait(30)
            drop_topic(settings, topic)
            drop_topic(settings, dlq)
            with WebHdfs(settings) as fs:
                fs.delete(root, recursive=True)


def archiver_rate(settings: Settings, count: int) -> dict:
    def preload(topic: str) -> None:
        config = GeneratorConfig(seed=7, count=count, invalid_fraction=0.05, late_fraction=0.1, topic=topic)
        produce(settings, config, None)
        log.info("pre-loaded %d records into %s", count, topic)

    with separate_archiver(settings, "bench-archive", preload) as (bench_settings, progress):
        # When the master query was first seen active; the archiver's start when it drained before
        # that was seen (a rate over a near-zero time would be absurd).
        started = time.monotonic()
        first_batch = None
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline:
            if first_batch is None and progress.exists():
                queries = json.loads(progress.read_text()).get("queries", {})
                if queries.get("archiver-master", {}).get("active"):
                    first_batch = time.monotonic()
            marker = completeness.latest(bench_settings)
            if marker is not None and marker.complete_before_ms is not None:
                totals = json.loads(progress.read_text()).get("totals", {})
                if totals.get("events", 0) + totals.get("records", 0) >= count:
                    elapsed = time.monotonic() - (first_batch or started)
                    return {
                        "records": count,
                        "seconds": elapsed,
                        "rate": count / elapsed,
                        "archived": totals.get("events"),
                        "dead_lettered": totals.get("records"),
                    }
            time.sleep(1)
        raise RuntimeError("the benchmark archiver did not drain the topic in 30 minutes")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gen-count", type=int, default=100_000)
    parser.add_argument("--arch-count", type=int, default=300_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure_logging("infra")
    settings = get_settings()

    rates = generator_rate(settings, args.gen_count, args.runs)
    archiver = Stack(settings, ["archiver"])
    archiver.down()
    try:
        drains = [archiver_rate(settings, args.arch_count) for _ in range(args.runs)]
    finally:
        archiver.up()
    result = {
        "generator_records_per_s_median": statistics.median(rates),
        "generator_runs": rates,
        "archiver_events_per_s_median": statistics.median(d["rate"] for d in drains),
        "archiver_runs": drains,
    }
    sys.stdout.write(
        f"generator: {result['generator_records_per_s_median']:,.0f} records/s (median of {len(rates)} runs of {args.gen_count:,})\n"
        f"archiver:  {result['archiver_events_per_s_median']:,.0f} records/s into HDFS (median of {len(drains)} drains of "
        f"{args.arch_count:,}; {drains[0]['archived']:,} archived + {drains[0]['dead_lettered']:,} dead-lettered each)\n"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
