"""Cold start time, first answer and idle memory of the local stack.

Each run starts every managed service from an empty state directory (storage formatted from
scratch) and records how long each took to become healthy. Right after `up`, one event is posted
to the API and the merged page_views answer is polled (every 50 ms) until it counts it: the first
answer, in seconds from the POST and from the start of `up` (issue target: ≤ 10 s from the
event). Then the stack idles and the resident memory of each service's process tree is read.
Prints per-service medians over the runs.

    .venv/bin/python bench/stack_startup.py --runs 3 --idle 30

The default ports must be free: run `lambdactl down` first.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from api_freshness import freshness  # bench/ itself: the scripts run as files
from api_latency import base_url
from figures import configure_logging

from definitions.settings import get_settings
from infra.process import ports_in_use
from infra.services import BY_NAME
from infra.stack import Stack

log = logging.getLogger("bench.stack_startup")


def first_answer(settings, run: str) -> dict:
    """One event posted now; seconds until the merged answer counts it (None: not within 300 s)."""
    probed = freshness(
        settings, base_url(settings), run, probes=1, interval=1.0, poll=0.05, timeout=300, via="api", give_up_s=300
    )
    return {"first_answer_s": probed["min_s"], "poll_errors": probed["poll_errors"]}


def one_run(state_dir: Path, idle_s: float) -> dict:
    settings = get_settings().model_copy(update={"state_dir": state_dir})
    stack = Stack(settings)
    started = time.monotonic()
    try:
        stack.up()
        total = time.monotonic() - started
        first = first_answer(settings, uuid.uuid4().hex[:8])
        first["after_up_start_s"] = time.monotonic() - started
        time.sleep(idle_s)
        rss = {s.name: s.rss_mb for s in stack.status(probe=False)}
        return {"ready_s": dict(stack.ready_after), "total_s": total, "rss_mb": rss, **first}
    finally:
        stack.down()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle", type=float, default=30.0, help="seconds to idle before reading memory")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    configure_logging("infra")

    settings = get_settings()
    busy = {}
    for name in settings.stack.managed_services:
        service = BY_NAME[name]
        busy.update(ports_in_use(service.host(settings), service.ports(settings).values()))
    if busy:
        log.error("ports in use (run `lambdactl down` first): %s", busy)
        return 2

    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="lambda-bench-") as tmp:
            runs.append(one_run(Path(tmp), args.idle))
        last = runs[-1]
        log.info(
            "run %d/%d: whole stack healthy in %.1fs; first answer %s s after its event (%.1fs after `up` began)",
            i + 1,
            args.runs,
            last["total_s"],
            "none" if last["first_answer_s"] is None else f"{last['first_answer_s']:.2f}",
            last["after_up_start_s"],
        )

    names = list(settings.stack.managed_services)
    rows = []
    for name in names:
        rows.append(
            {
                "service": name,
                "ready_s_median": statistics.median(r["ready_s"][name] for r in runs),
                "rss_mb_median": statistics.median(r["rss_mb"][name] for r in runs),
            }
        )
    summary = {
        "runs": args.runs,
        "idle_s": args.idle,
        "stack_ready_s_median": statistics.median(r["total_s"] for r in runs),
        "stack_rss_mb_median": statistics.median(sum(r["rss_mb"].values()) for r in runs),
        "first_answer_s": [None if r["first_answer_s"] is None else round(r["first_answer_s"], 2) for r in runs],
        "first_answer_after_up_start_s": [round(r["after_up_start_s"], 1) for r in runs],
        "services": rows,
    }
    out = sys.stdout
    out.write(f"cold start over {args.runs} run(s), memory after {args.idle:.0f}s idle\n")
    out.write(f"{'service':<15} {'ready (s)':>10} {'RSS (MiB)':>10}\n")
    for row in rows:
        out.write(f"{row['service']:<15} {row['ready_s_median']:>10.1f} {row['rss_mb_median']:>10.0f}\n")
    out.write(f"{'whole stack':<15} {summary['stack_ready_s_median']:>10.1f} {summary['stack_rss_mb_median']:>10.0f}\n")
    out.write(
        f"first merged answer after the first event (s), per run: {summary['first_answer_s']}; "
        f"after `up` began: {summary['first_answer_after_up_start_s']}\n"
    )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
