"""Query API latency at a fixed request rate, from a native load generator (`hey`, Debian's package).

For each route, `hey` sends `--rate` requests/s (its `--workers` connections, each limited to
rate/workers per second, keep-alive) for `--duration` seconds at the running API after a short
warm-up; every request's latency and status come back as CSV. Printed per route: the rate asked and
achieved (answers with status 200), p50 / p90 / p99 / max latency of those, the errors (any status
but 200), and the shortfall: requests hey's tickers schedule that are not in its CSV, which leaves
out its timeouts and transport errors, and ticks its workers skipped while a request was still
waiting (a server slower than the rate). hey runs
on the same 2 cores as the stack, so it is part of the load. hey's connections send in lockstep (a
burst of all of them at each tick); each route is measured that way and again with the connections
split among `--stagger` hey processes started apart, whose bursts interleave, and (page_views) ask
for the `--urls` most viewed URLs in turn, so the API's caches see a mix of queries, not one.
Measures page_views at 500/s and top_pages at 200/s by default (issue targets: p99 ≤ 15 ms and ≤ 30 ms, 0 errors).

    .venv/bin/python bench/api_load.py --json /tmp/bench_api_load.json

Needs the stack up (`lambdactl up`).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

from figures import configure_logging, emit, fmt, percentile  # bench/ itself: the scripts run as files

from definitions.settings import get_settings

log = logging.getLogger("bench.api_load")

ROUTES: dict[str, tuple[str, int]] = {  # route: (path, default rate); page_views: of the most viewed URLs
    "page_views": ("/api/v1/views/page_views?url=/&granularity=hour", 500),
    "top_pages": ("/api/v1/views/top_pages?granularity=hour&limit=10", 200),
}


def _samples(text: str) -> list[tuple[float, int]]:
    out = []
    for row in csv.DictReader(io.StringIO(text)):
        status = row.get("status-code") or "0"
        out.append((float(row["response-time"]), int(status) if status.isdigit() else 0))
    return out


def hey(
    urls: list[str], rate: int, workers: int, duration_s: int, groups: int = 1
) -> tuple[list[tuple[float, int]], int]:
    """((latency s, status) of every request answered, the requests hey's tickers schedule).

    hey's workers each send on a ticker of their own, all started together: its `workers`
    connections send in lockstep, a burst of `workers` requests every workers/rate seconds. With
    `groups` > 1 the connections are split among that many hey processes started that far apart
    divided by `groups` (a burst of workers/groups every workers/rate/groups seconds): the same rate
    from clients that are not synchronised. Group i asks for `urls[i % len(urls)]`."""
    workers = max(1, min(workers, rate))
    groups = max(1, min(groups, workers))
    per_worker = rate / workers
    period_s = 1 / per_worker
    procs = []
    for i in range(groups):
        connections = workers // groups + (1 if i < workers % groups else 0)
        cmd = ["hey", "-z", f"{duration_s}s", "-c", str(connections), "-q", f"{per_worker:g}", "-t", "10", "-o", "csv"]
        if i:
            time.sleep(period_s / groups)  # the next group's ticks fall between the earlier ones'
        url = urls[i % len(urls)]
        procs.append(subprocess.Popen([*cmd, url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out: list[tuple[float, int]] = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=duration_s + 60)
        if proc.returncode != 0:
            raise SystemExit(f"hey failed ({proc.returncode}): {stderr.strip()[:500]}")
        out += _samples(stdout)
    return out, scheduled(per_worker, workers, duration_s)


def scheduled(per_worker: float, workers: int, duration_s: int) -> int:
    """Requests `workers` tickers of `per_worker`/s send in `duration_s` (one tick each short: the
    last may fall at the deadline)."""
    return max(0, int(per_worker * duration_s) * workers - workers)


def unanswered(answered: int, expected: int) -> int:
    """Requests hey scheduled that are not in its CSV (timed out, refused, reset, or never sent
    because the worker was still waiting for an answer)."""
    return max(0, expected - answered)


def measure(
    base: str, route: str, paths: list[str], rate: int, workers: int, duration_s: int, warmup_s: int, groups: int = 1
) -> dict:
    urls = [base + path for path in paths[:groups]]
    if warmup_s:
        hey(urls[:1], max(1, rate // 4), workers, warmup_s)
    started = time.monotonic()
    samples, expected = hey(urls, rate, workers, duration_s, groups)
    wall = time.monotonic() - started
    ok = [latency * 1000 for latency, status in samples if status == 200]
    missing = unanswered(len(samples), expected)
    return {
        "route": route,
        "arrivals": "lockstep" if groups == 1 else f"{groups} groups",
        "distinct_queries": len(set(urls)),
        "rate_asked": rate,
        "rate_achieved": round(len(ok) / duration_s, 1),
        "requests": len(samples),
        "errors": len(samples) - len(ok),
        "shortfall": missing,
        "p50_ms": percentile(ok, 50),
        "p90_ms": percentile(ok, 90),
        "p99_ms": percentile(ok, 99),
        "max_ms": max(ok) if ok else None,
        "wall_s": round(wall, 1),
    }


def page_views_paths(base: str, count: int) -> list[str]:
    """page_views queries of the `count` most viewed URLs (top_pages), or of `/` when none is known."""
    with urllib.request.urlopen(f"{base}/api/v1/views/top_pages?granularity=hour&limit={max(1, count)}") as resp:
        rows = json.load(resp).get("rows", [])
    urls = [row["url"] for row in rows][: max(1, count)] or ["/"]
    return [f"/api/v1/views/page_views?{urllib.parse.urlencode({'url': url, 'granularity': 'hour'})}" for url in urls]


def report(results: list[dict], duration_s: int) -> str:
    lines = [
        f"API at a fixed rate (hey, {duration_s}s per route, keep-alive, loopback)",
        f"{'route':<14} {'arrivals':>10} {'queries':>7} {'asked/s':>8} {'got/s':>8} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} {'errors':>7} {'short':>7}",
    ]
    for r in results:
        lines.append(
            f"{r['route']:<14} {r['arrivals']:>10} {r['distinct_queries']:>7} {r['rate_asked']:>8} {fmt(r['rate_achieved'], 1):>8} {fmt(r['p50_ms'], 1):>8} "
            f"{fmt(r['p90_ms'], 1):>8} {fmt(r['p99_ms'], 1):>8} {fmt(r['max_ms'], 1):>8} {r['errors']:>7} {r['shortfall']:>7}"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--routes", default=",".join(ROUTES), help="comma-separated: " + ", ".join(ROUTES))
    parser.add_argument("--rate", type=int, default=None, help="requests/s for every route (default: per route)")
    parser.add_argument("--workers", type=int, default=50, help="hey's connections")
    parser.add_argument(
        "--stagger",
        type=int,
        default=10,
        help="also measure with the connections split among this many hey processes started apart "
        "(clients not in lockstep); 1: only hey's lockstep bursts",
    )
    parser.add_argument(
        "--urls",
        type=int,
        default=10,
        help="page_views: the staggered groups ask for this many URLs in turn, the most viewed first "
        "(lockstep asks for the most viewed one)",
    )
    parser.add_argument("--duration", type=int, default=20, help="seconds per route")
    parser.add_argument("--warmup", type=int, default=3, help="seconds at a quarter of the rate first")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    configure_logging()
    if shutil.which("hey") is None:
        raise SystemExit("hey is not installed (`make setup` installs it)")
    settings = get_settings()
    if settings.api.host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"api.host is {settings.api.host}: this benchmark only loads an API on the loopback interface")
    base = f"http://{settings.api.host}:{args.port or settings.api.port}"
    results = []
    for route in [r for r in args.routes.split(",") if r]:
        if route not in ROUTES:
            raise SystemExit(f"unknown route {route!r}: one of {', '.join(ROUTES)}")
        path, rate = ROUTES[route]
        paths = page_views_paths(base, args.urls) if route == "page_views" else [path]
        log.info("%s at %d req/s for %ds", route, args.rate or rate, args.duration)
        for groups in sorted({1, max(1, args.stagger)}):
            results.append(
                measure(base, route, paths, args.rate or rate, args.workers, args.duration, args.warmup, groups)
            )
    emit({"routes": results, "duration_s": args.duration}, report(results, args.duration), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
