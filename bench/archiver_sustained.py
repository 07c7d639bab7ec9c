"""The archiver's highest sustained input rate: a ladder of rate steps sent by Kafka's own producer
performance tool (bench/native_producer.py: rates no Python producer reaches), each judged as the
speed layer's steps are (bench/rate_ladder.py): by the trend of the lag just after each committed
master batch, and by the drain after the step.

A separate archiver runs on fresh topics with its own master path and checkpoints (the stack's own
archiver is paused meanwhile: 2 cores). It is warmed up first on `--warmup` records sent as fast as
the tool can, so that the steps measure a running archiver, not its first batches.

    .venv/bin/python bench/archiver_sustained.py --rates 20000,30000,40000 --step-duration 60

Needs the stack up (`lambdactl up`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

from figures import configure_logging, fmt, int_list  # bench/ itself: the scripts run as files
from ingest_throughput import separate_archiver  # bench/ itself
from native_producer import NativeProducer, write_payload  # bench/ itself
from rate_ladder import climb, ladder_summary, rate_step, wait_drained  # bench/ itself
from speed_lag import LagProbe  # bench/ itself

from definitions.settings import get_settings
from infra.stack import Stack
from ingest.archiver import MASTER_QUERY

log = logging.getLogger("bench.archiver")


def ladder(settings, payload: Path, rates: list[int], duration: float, drain_timeout: float, warmup: int) -> dict:
    with separate_archiver(settings, "bench-sustained") as (bench, progress):
        topic = bench.kafka.events_topic
        lag = LagProbe(bench, checkpoint=f"{bench.archiver.checkpoint_dir}/master")

        def master_progress() -> dict | None:
            try:
                return json.loads(progress.read_text()).get("queries", {}).get(MASTER_QUERY)
            except (OSError, ValueError):
                return None

        def source(rate: int, count: int) -> NativeProducer:
            return NativeProducer(settings, topic, payload, count, rate).start()

        steps: list[dict] = []
        try:
            source(-1, warmup).join()
            warmed = wait_drained(lag, lag.end_offsets(), 600)
            if warmed is None:
                raise RuntimeError(f"the benchmark archiver did not archive {warmup:,} warm-up records in 600 s")
            log.info("warm-up of %d records archived", warmup)
            steps = climb(
                rates,
                lambda rate: rate_step(bench, lag, "archiver", rate, duration, drain_timeout, source, master_progress),
            )
        finally:
            lag.close()
    return {
        **ladder_summary(rates, steps),
        "step_duration_s": duration,
        "trigger_s": settings.archiver.trigger_s,
        "max_offsets_per_trigger": settings.archiver.max_offsets_per_trigger,
        "warmup_records": warmup,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="20000,30000,40000", help="comma-separated records/s, one step each")
    parser.add_argument("--step-duration", type=float, default=60.0)
    parser.add_argument("--drain-timeout", type=float, default=60.0)
    parser.add_argument("--warmup", type=int, default=300_000)
    parser.add_argument("--payload-records", type=int, default=50_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure_logging("infra")
    settings = get_settings()
    if args.step_duration < 4 * settings.archiver.trigger_s:
        parser.error(
            f"--step-duration must be at least 4 triggers ({4 * settings.archiver.trigger_s:g} s): a step is "
            "judged by the lag after its commits, the first one left out"
        )
    rates = int_list(args.rates)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())

    archiver = Stack(settings, ["archiver"])
    try:
        archiver.down()
        with tempfile.TemporaryDirectory(prefix="lambda-bench-payload-") as tmp:
            payload = write_payload(Path(tmp) / "payload.txt", args.payload_records)
            result = ladder(settings, payload, rates, args.step_duration, args.drain_timeout, args.warmup)
    finally:
        archiver.up()
    lines = [
        f"archiver sustained input ({started}; trigger {result['trigger_s']} s, steps of {args.step_duration:.0f} s):"
    ]
    for s in result["steps"]:
        lines.append(
            f"  {s['target_rate']:>7,}/s asked, {s['offered_rate']:>9,.0f}/s sent: batches median "
            f"{fmt(s['batch_ms_median'])} ms (max {fmt(s['batch_ms_max'])}), lag trend {fmt(s['lag_growth'])} "
            f"records over the step (tolerance {s['lag_growth_tolerance']:,.0f}), drained after "
            f"{fmt(s['drained_after_s'], 1)} s: {'sustained' if s['sustained'] else 'NOT sustained'}"
        )
    lines.append(f"highest sustained: {fmt(result['highest_sustained_offered_rate'])} records/s")
    fit = result["batch_cost_fit"]
    if fit and fit.get("ceiling_rows_per_s"):
        lines.append(
            f"master batch cost fit: {fit['fixed_ms']:,.0f} ms + {fit['per_row_ms'] * 1000:,.1f} µs per record "
            f"(ceiling ~{fit['ceiling_rows_per_s']:,.0f} records/s)"
        )
    sys.stdout.write("\n".join(lines) + "\n")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
