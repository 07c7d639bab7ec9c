"""Speed-layer freshness and highest sustained input rate, measured on the running stack.

1. Freshness: the generator sends background traffic into topic `events` (`--fresh-rate`
   records/s for `--fresh-duration` s, URLs under /bench-bg-<run>/); meanwhile a separate
   producer (linger 0) sends a probe page view every `--probe-interval` s, each with its own URL
   /bench-fresh-<run>/<i>. A probe's produce time is the broker's LogAppendTime of its record
   (RecordMetadata.timestamp). Cassandra's `realtime_by_key` (view page_views, granularity
   minute, key = key_text([url])) is polled every `--poll-interval` s for all pending probes in
   one query; freshness = the first poll that sees the probe's count − its produce time.
   p50/p95/p99 over the probes.
2. Highest sustained rate: the generator sends `--rates` records/s (valid events, URLs under
   /bench-rate-<run>/) for `--step-duration` s each. Every second: the lag = Kafka's end offsets
   of `events` − the offsets of the speed layer's last committed micro-batch (read from its
   checkpoint on HDFS), and its progress file (`rows_behind`, input/processed rows/s, batch ms).
   A step is sustained when the lag does not grow: the least-squares trend of the lag just after
   each batch commit, times the step's duration, stays below 5 s worth of records, and the backlog is gone within `--drain-timeout` s of the step's end. The ladder stops at the first step that is not sustained.
   With `--native`, Kafka's console producer sends the steps instead (bench/native_producer.py:
   `--base-records` generator records, each sent with an event_id of its own), so rates above what
   the Python generator sends (~6,800 records/s here) reach the speed layer, and the generator's
   CPU is not taken from it.

    .venv/bin/python bench/speed_freshness.py --json /tmp/bench_speed.json

Needs the stack up (`lambdactl up`), speed layer included. The benchmark's events stay in topic
`events` (and so reach the master dataset): their URLs start with /bench-.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from figures import configure_logging, emit, int_list  # bench/ itself: the scripts run as files
from freshness_probes import freshness  # bench/ itself
from native_producer import UniqueRecordsProducer, base_records  # bench/ itself
from rate_ladder import sustained_rates  # bench/ itself
from speed_lag import speed_dedupe, speed_progress  # bench/ itself
from speed_report import report  # bench/ itself

from definitions.settings import get_settings

log = logging.getLogger("bench.speed")


def native_source(settings, run: str, base_count: int) -> Callable[[int, int], UniqueRecordsProducer]:
    """Rate steps sent by Kafka's console producer: `base_count` generator records made once (their
    URLs under /bench-rate-<run>/), each step's records with event_ids of their own."""
    log.info("making %d records for the console producer", base_count)
    base = base_records(base_count, zlib.crc32(run.encode()), f"/bench-rate-{run}")

    def start(rate: int, count: int) -> UniqueRecordsProducer:
        tag = zlib.crc32(f"{run}/{rate}".encode())
        return UniqueRecordsProducer(settings, settings.kafka.events_topic, base, count, rate, tag).start()

    return start


# --- main -------------------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--fresh-rate", type=float, default=200.0, help="background records/s during the freshness test"
    )
    parser.add_argument("--fresh-duration", type=float, default=60.0, help="seconds of background traffic and probes")
    parser.add_argument("--probe-interval", type=float, default=0.5)
    parser.add_argument("--poll-interval", type=float, default=0.1)
    parser.add_argument("--probe-timeout", type=float, default=120.0, help="seconds a probe may take to become visible")
    parser.add_argument(
        "--rates", type=int_list, default=int_list("1000,2000,3000,4000,5000,6000"), help="records/s, comma-separated"
    )
    parser.add_argument("--step-duration", type=float, default=60.0)
    parser.add_argument(
        "--drain-timeout", type=float, default=60.0, help="seconds the speed layer may take to catch up after a step"
    )
    parser.add_argument(
        "--native", action="store_true", help="rate steps sent by Kafka's console producer, not the Python generator"
    )
    parser.add_argument("--base-records", type=int, default=100_000, help="--native: distinct record bodies sent")
    parser.add_argument("--skip-freshness", action="store_true")
    parser.add_argument("--skip-rates", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure_logging("infra")
    settings = get_settings()
    progress = speed_progress(settings)
    if not progress or not progress.get("active"):
        log.error("the speed layer is not running (lambdactl status)")
        return 2

    run = f"{int(time.time())}-{os.getpid()}"
    result: dict = {
        "run": run,
        "trigger_s": settings.speed.trigger_s,
        "ingest_bucket_s": settings.ingest_bucket_s,
        "dedupe": speed_dedupe(settings),
        "errors": {},
    }
    loads = [os.getloadavg()[0]]
    status = 0
    if not args.skip_freshness:
        try:
            log.info(
                "freshness: %.0f records/s background for %.0fs, a probe every %.1fs",
                args.fresh_rate,
                args.fresh_duration,
                args.probe_interval,
            )
            result["freshness"] = freshness(
                settings,
                run,
                args.fresh_rate,
                args.fresh_duration,
                args.probe_interval,
                args.poll_interval,
                args.probe_timeout,
            )
            fresh = result["freshness"]
            if fresh["not_visible"] or fresh["send_errors"]:  # its percentiles leave those probes out
                log.error(
                    "freshness: %d of %d probes never became visible, %d could not be sent",
                    len(fresh["not_visible"]),
                    fresh["probes"],
                    len(fresh["send_errors"]),
                )
                result["errors"]["freshness"] = f"{len(fresh['not_visible'])} of {fresh['probes']} probes not visible"
                status = 1
        except Exception as exc:
            log.exception("freshness failed")
            result["errors"]["freshness"] = f"{type(exc).__name__}: {exc}"
            status = 1
        loads.append(os.getloadavg()[0])
    if not args.skip_rates:
        try:
            source = native_source(settings, run, args.base_records) if args.native else None
            result["rates"] = sustained_rates(settings, run, args.rates, args.step_duration, args.drain_timeout, source)
            result["rates"]["sender"] = "kafka.tools.ConsoleProducer" if args.native else "ingest.generator"

        except Exception as exc:
            log.exception("rate steps failed")
            result["errors"]["rates"] = f"{type(exc).__name__}: {exc}"
            status = 1
        loads.append(os.getloadavg()[0])
    result["load_average"] = loads
    emit(result, report(result), args.json)
    return status


if __name__ == "__main__":
    sys.exit(main())
