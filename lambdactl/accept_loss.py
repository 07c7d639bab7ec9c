"""`lambdactl accept-loss JOB`: accept that Kafka deleted records a streaming job had not read.

A job that finds such a gap at its start (stores.kafka_gaps) exits, naming the lost offsets, and
so does every restart of it. This command records the operator's acceptance of exactly the gaps
it prints; the job's next start (`lambdactl up`) records the loss for good and runs from the first
offsets Kafka keeps. A gap that grows meanwhile needs a new acceptance.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

from definitions import jobs
from definitions.settings import Settings
from lambdactl.output import _emit, _say

JOBS = (jobs.ARCHIVER, jobs.SPEED_LAYER)


def cmd_accept_loss(settings: Settings, args: argparse.Namespace) -> int:
    from stores import kafka_gaps

    found = kafka_gaps.gaps(settings, args.job)
    if not found:
        _say(f"{args.job} lost nothing: Kafka keeps every record past its checkpoint")
    else:
        kafka_gaps.accept(settings, args.job, found)
        for gap in found:
            _say(f"accepted as lost: {gap.describe()}")
        _say(f"{args.job} runs past them at its next start (`lambdactl up` starts it if it gave up)")
    if args.json:
        _emit({"job": args.job, "accepted": [asdict(g) for g in found]})
    return 0


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "accept-loss", help="accept records Kafka deleted before a streaming job read them, so it can run on"
    )
    parser.add_argument("job", choices=JOBS)
    parser.add_argument("--json", action="store_true", help="also print the accepted gaps as one JSON line")
    parser.set_defaults(func=cmd_accept_loss)
