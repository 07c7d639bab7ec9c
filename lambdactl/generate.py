"""`lambdactl generate`: a realistic, seeded clickstream into Kafka (ingest/generator.py), with what
was sent and the ground truth it implies written beside it on request."""

from __future__ import annotations

import argparse
import logging
from datetime import UTC
from pathlib import Path

from definitions.settings import Settings
from lambdactl.arg_types import finite, given, iso_time
from lambdactl.output import _say
from stores.kafka import COMPRESSION_CODECS

log = logging.getLogger("lambdactl")


def cmd_generate(settings: Settings, args: argparse.Namespace) -> int:
    import contextlib

    from ingest.generator import produce, read_sent
    from ingest.truth import VerdictMismatch, write_truth

    start = generation_start(args)
    try:
        config = _generator_config(args, start)
    except ValueError as exc:
        log.error("generate refused, nothing sent: %s", exc)
        return 2
    events_out = args.events_out
    if args.truth_out and not events_out:
        events_out = args.truth_out.with_suffix(".events.jsonl")
    if events_out and args.truth_out and events_out.resolve() == args.truth_out.resolve():
        # the truth was written over the record of what was sent, its partitions and offsets lost
        log.error("generate refused, nothing sent: --events-out and --truth-out name one file (%s)", events_out)
        return 2
    with contextlib.ExitStack() as stack:
        handle = stack.enter_context(open(events_out, "w")) if events_out else None
        report = produce(settings, config, handle, progress_every=max(1000, args.count // 10))
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(report.by_kind.items()))
    _say(f"sent {report.sent} records in {report.seconds:.1f}s ({report.rate:,.0f}/s); {kinds}")
    if events_out:
        _say(f"what was sent: {events_out}")
    if args.truth_out:
        try:
            write_truth(read_sent(events_out), args.granularity, args.truth_out, settings.events)
        except VerdictMismatch as exc:  # the records are sent: what was sent stays in events_out
            log.error(
                "no ground truth written: %s (the generator's options make records the platform's event "
                "limits judge otherwise than meant: events.* settings, or --start, --span, --late-max)",
                exc,
            )
            return 1
        _say(f"ground truth ({args.granularity} buckets): {args.truth_out}")
    return 0 if report.failed == 0 else 1


def _generator_config(args: argparse.Namespace, start):
    """`generate`'s GeneratorConfig; ValueError naming what is wrong with its arguments."""
    from ingest.generator import GeneratorConfig

    return GeneratorConfig(
        seed=args.seed,
        count=args.count,
        rate=args.rate,
        pages=args.pages,
        users=args.users,
        span_s=args.span,
        start=start,
        late_fraction=args.late_fraction,
        late_min_s=args.late_min,
        late_max_s=args.late_max,
        duplicate_fraction=args.duplicate_fraction,
        invalid_fraction=args.invalid_fraction,
        topic=args.topic or "",
        compression=args.compression,
    )


def generation_start(args: argparse.Namespace):
    """`generate --start` as a UTC datetime (read as `iso_time` validated it), or None: now."""
    from datetime import datetime

    from definitions.times import parse_iso_ms

    return datetime.fromtimestamp(parse_iso_ms(args.start) / 1000, UTC) if args.start else None


def add_parser(sub) -> None:
    gen = sub.add_parser("generate", help="produce a realistic, seeded clickstream into Kafka")
    gen.add_argument("--count", type=int, default=10_000, help="records to send")
    gen.add_argument("--rate", type=finite, default=0.0, help="records per second (0: as fast as possible)")
    gen.add_argument("--seed", type=int, default=42)
    gen.add_argument("--pages", type=int, default=500)
    gen.add_argument("--users", type=int, default=5_000)
    gen.add_argument(
        "--span",
        type=finite,
        default=0.0,
        help="spread event times over this many seconds before --start, following a daily rhythm (0: live)",
    )
    gen.add_argument("--start", type=iso_time, help="ISO time the simulated span ends at (default: now)")
    gen.add_argument("--late-fraction", type=finite, default=0.0)
    gen.add_argument("--late-min", type=finite, default=3_600.0, help="seconds")
    gen.add_argument("--late-max", type=finite, default=172_800.0, help="seconds")
    gen.add_argument("--duplicate-fraction", type=finite, default=0.0)
    gen.add_argument("--invalid-fraction", type=finite, default=0.0)
    gen.add_argument("--topic", type=given, help="default: the events topic from settings")
    gen.add_argument(
        "--compression",
        choices=COMPRESSION_CODECS,
        default="none",
        help="the producer's compression codec, as any Kafka client may choose it",
    )
    gen.add_argument(
        "--events-out", type=Path, help="write every sent record (kind, partition, offset, ingest time) as JSONL"
    )
    gen.add_argument("--truth-out", type=Path, help="write the ground-truth view values the valid events imply")
    gen.add_argument("--granularity", choices=["minute", "hour", "day"], default="hour")
    gen.set_defaults(func=cmd_generate)
