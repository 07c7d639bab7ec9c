"""Hostile queries against the running API: refused fast, memory bounded, normal queries unaffected.

1. Baseline: a normal query — page views of one URL over the last hour by minute (the busiest URL
   of the last hour by top_pages, else "/") — sent back to back for `--baseline` s; its latency.
2. Under attack: `--waves` waves, each `--concurrency` simultaneous 100-year `granularity=minute`
   page_views queries plus the same century on every other declared view and the absurd ranges
   of issue 15 (0001–9999, before 1970, far future), each request on its own connection. Meanwhile
   the normal query runs back to back in its own thread, and the API process's RSS is sampled
   every `--sample-interval` s (psutil; the process listening on the API's port, or `--pid`).
   Reported: status codes, median/max latency of the hostile requests, peak RSS (and before), the
   normal query's median/max latency with and without the attack.

    .venv/bin/python bench/hostile_queries.py --json /tmp/bench_hostile.json

Needs the stack up (`lambdactl up`). It first sends ONE century query and stops unless that is
refused within `--probe-timeout` s: an API that builds the bucket list first would need gigabytes
per request (issue 15), and this script never sends it forty.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import psutil
from figures import configure_logging, emit, fmt  # bench/ itself: the scripts run as files

from definitions.settings import Settings, get_settings

log = logging.getLogger("bench.hostile")

CENTURY = {"start": "1926-01-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}
CENTURY_PAGE_VIEWS = ("/api/v1/views/page_views", {"url": "/", "granularity": "minute", **CENTURY})
ABSURD = [
    (
        "/api/v1/views/page_views",
        {"url": "/", "granularity": "minute", "start": "0001-01-01T00:00:00Z", "end": "9999-12-31T23:59:59Z"},
    ),
    (
        "/api/v1/views/page_views",
        {"url": "/", "granularity": "hour", "start": "1969-12-31T00:00:00Z", "end": "1970-01-01T01:00:00Z"},
    ),
    (
        "/api/v1/views/top_pages",
        {"granularity": "minute", "start": "0001-01-01T00:00:00+14:00", "end": "9999-12-31T23:59:59-14:00"},
    ),
    (
        "/api/v1/views/page_views",
        {"url": "/", "granularity": "day", "start": "2026-01-01T00:00:00Z", "end": "9999-01-01T00:00:00Z"},
    ),
]


def base_url(settings: Settings, port: int | None) -> str:
    host = settings.api.host
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"api.host is {host}: this benchmark only loads an API on the loopback interface")
    return f"http://{host}:{port or settings.api.port}"


def api_pid(settings: Settings, port: int) -> int:
    """The process listening on the API's port (whoever started it), else the state directory's
    run/api.pid."""
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            return conn.pid
    text = (settings.state_dir / "run" / "api.pid").read_text()
    try:
        return int(json.loads(text)["pid"])
    except (ValueError, TypeError, KeyError):
        return int(text.strip())


def century_requests(base: str) -> list[tuple[str, dict]]:
    """The same century on every other declared view, at its finest granularity, its keys set."""
    out = []
    for view in httpx.get(f"{base}/api/v1/views", timeout=30).json()["views"]:
        if view["name"] == "page_views":
            continue
        params = {"granularity": view["granularities"][0], **CENTURY}
        if view["layout"] != "by_bucket":
            params.update({key: {"country": "DE", "device": "mobile"}.get(key, "/") for key in view["keys"]})
        out.append((f"/api/v1/views/{view['name']}", params))
    return out


def normal_query(base: str) -> tuple[str, dict]:
    """Page views of one URL over the last hour, by minute: the busiest URL of the hour, else "/"."""
    now = int(time.time())
    window = {
        "start": time.strftime("%Y-%m-%dT%H:%M:00Z", time.gmtime(now - 3_600)),
        "end": time.strftime("%Y-%m-%dT%H:%M:00Z", time.gmtime(now + 60)),
    }
    url = "/"
    try:
        rows = (
            httpx.get(
                f"{base}/api/v1/views/top_pages", params={"granularity": "minute", "limit": 1, **window}, timeout=60
            )
            .json()
            .get("rows")
            or []
        )
        url = rows[0]["url"] if rows else url
    except (httpx.HTTPError, ValueError, KeyError):
        pass
    return "/api/v1/views/page_views", {"url": url, "granularity": "minute", **window}


def timed(client: httpx.Client, path: str, params: dict) -> tuple[int | str, float]:
    started = time.perf_counter()
    try:
        status: int | str = client.get(path, params=params).status_code
    except httpx.HTTPError as exc:
        status = type(exc).__name__
    return status, time.perf_counter() - started


class Sampler(threading.Thread):
    """The RSS of one process every `interval` s until stopped."""

    def __init__(self, pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.process, self.interval = psutil.Process(pid), interval
        self.samples: list[int] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                self.samples.append(self.process.memory_info().rss)
            except psutil.Error:  # the process died: that is a finding, keep the samples
                return
            self.stopped.wait(self.interval)


class Repeater(threading.Thread):
    """One request sent back to back until stopped; the latency of each answer."""

    def __init__(self, base: str, request: tuple[str, dict]) -> None:
        super().__init__(daemon=True)
        self.base, self.request = base, request
        self.latencies: list[float] = []
        self.statuses: Counter = Counter()
        self.stopped = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=120) as client:
            while not self.stopped.is_set():
                status, seconds = timed(client, *self.request)
                self.statuses[str(status)] += 1
                self.latencies.append(seconds)


def wave(base: str, requests: list[tuple[str, dict]]) -> list[tuple[str, int | str, float]]:
    """All `requests` at once, each from its own thread and connection."""
    results: list = [None] * len(requests)
    ready = threading.Barrier(len(requests))

    def one(i: int) -> None:
        with httpx.Client(base_url=base, timeout=120) as client:
            ready.wait()
            status, seconds = timed(client, *requests[i])
            results[i] = (requests[i][0].rsplit("/", 1)[-1], status, seconds)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def server_seconds(base: str) -> dict[tuple[str, str], tuple[float, float]]:
    """{(route, status): (count, sum of seconds)} of GET answers, from the API's own latency histogram
    (/metrics): the time the API spent on them, without the clients' share of the machine."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, str], list[float]] = {}
    text = httpx.get(f"{base}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name in ("lambda_api_request_seconds_count", "lambda_api_request_seconds_sum")
                and sample.labels.get("method") == "GET"
            ):
                key = (sample.labels["route"], sample.labels["status"])
                slot = out.setdefault(key, [0.0, 0.0])
                slot[0 if sample.name.endswith("_count") else 1] += sample.value
    return {k: (v[0], v[1]) for k, v in out.items()}


def server_mean_ms(before: dict, after: dict, status_prefix: str) -> dict[str, float]:
    """Mean server-side milliseconds per route of the answers between two `server_seconds` readings."""
    means = {}
    for (route, status), (count, total) in after.items():
        if not status.startswith(status_prefix):
            continue
        count0, total0 = before.get((route, status), (0.0, 0.0))
        if count > count0:
            means[f"{route} {status}"] = (total - total0) / (count - count0) * 1000
    return means


def stats(latencies: list[float]) -> dict:
    ms = [x * 1000 for x in latencies]
    return {"n": len(ms), "median_ms": statistics.median(ms) if ms else None, "max_ms": max(ms) if ms else None}


def run(base: str, pid: int, args) -> dict:
    normal = normal_query(base)
    process = psutil.Process(pid)
    result: dict = {
        "base_url": base,
        "pid": pid,
        "normal_query": {"path": normal[0], **normal[1]},
        "rss_before_mb": process.memory_info().rss / 2**20,
    }

    baseline = Repeater(base, normal)
    baseline.start()
    time.sleep(args.baseline)
    baseline.stopped.set()
    baseline.join()
    result["normal_alone"] = {**stats(baseline.latencies), "statuses": dict(baseline.statuses)}

    hostile = [CENTURY_PAGE_VIEWS] * args.concurrency + century_requests(base) + ABSURD
    sampler = Sampler(pid, args.sample_interval)
    under = Repeater(base, normal)
    sampler.start()
    under.start()
    answers = []
    metrics_before = server_seconds(base)
    cpu_before = sum(process.cpu_times()[:2])
    started = time.perf_counter()
    for _ in range(args.waves):
        answers += wave(base, hostile)
    attack_s = time.perf_counter() - started
    metrics_after = server_seconds(base)
    cpu_s = sum(process.cpu_times()[:2]) - cpu_before
    under.stopped.set()
    under.join()
    sampler.stopped.set()
    sampler.join()

    century = [s for name, _, s in answers[: args.concurrency * args.waves]]
    result.update(
        {
            "waves": args.waves,
            "requests_per_wave": len(hostile),
            "attack_s": attack_s,
            "hostile": {
                **stats([s for _, _, s in answers]),
                "statuses": dict(Counter(str(st) for _, st, _ in answers)),
            },
            "century_page_views": stats(century),
            "hostile_by_route": {
                name: dict(Counter(str(st) for n, st, _ in answers if n == name))
                for name in sorted({n for n, _, _ in answers})
            },
            "over_1s": sum(1 for _, _, s in answers if s > 1.0),
            "server_mean_ms_4xx": server_mean_ms(metrics_before, metrics_after, "4"),
            "api_cpu_s": cpu_s,
            "api_cpu_ms_per_request": cpu_s * 1000 / max(1, len(answers) + len(under.latencies)),
            "normal_under_attack": {**stats(under.latencies), "statuses": dict(under.statuses)},
            "rss_peak_mb": max(sampler.samples, default=0) / 2**20,
            "rss_samples": len(sampler.samples),
            "api_alive": psutil.pid_exists(pid),
            "load_average": os.getloadavg(),
        }
    )
    return result


def report(r: dict) -> str:
    h, c = r["hostile"], r["century_page_views"]
    alone, under = r["normal_alone"], r["normal_under_attack"]
    lines = [
        f"Hostile queries against {r['base_url']} (API pid {r['pid']}): {r['waves']} waves of {r['requests_per_wave']} "
        f"simultaneous requests, {r['attack_s']:.1f} s in all",
        f"  century of minutes on page_views ({c['n']}): median {fmt(c['median_ms'], 1)} ms, max {fmt(c['max_ms'], 1)} ms",
        f"  all hostile requests ({h['n']}): median {fmt(h['median_ms'], 1)} ms, max {fmt(h['max_ms'], 1)} ms, "
        f"{r['over_1s']} over 1 s; statuses {h['statuses']}",
        *[f"    {name}: {statuses}" for name, statuses in r["hostile_by_route"].items()],
        "  time the API itself spent per 4xx answer (its /metrics histogram, queueing in its event loop included): "
        + ", ".join(f"{k} {v:.1f} ms" for k, v in r["server_mean_ms_4xx"].items()),
        f"  API CPU during the attack: {r['api_cpu_s']:.2f} s, {r['api_cpu_ms_per_request']:.1f} ms per request "
        "(hostile and normal together)",
        f"  API RSS: {r['rss_before_mb']:.0f} MiB before, peak {r['rss_peak_mb']:.0f} MiB during "
        f"({r['rss_samples']} samples); process alive afterwards: {r['api_alive']}",
        f"  normal query (page_views of {r['normal_query']['url']!r}, last hour by minute): "
        f"alone median {fmt(alone['median_ms'], 1)} ms, max {fmt(alone['max_ms'], 1)} ms ({alone['n']} requests); "
        f"under attack median {fmt(under['median_ms'], 1)} ms, max {fmt(under['max_ms'], 1)} ms ({under['n']} requests, "
        f"statuses {under['statuses']})",
        f"  (load average {', '.join(f'{x:.1f}' for x in r['load_average'])} on {os.cpu_count()} cores)",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=40, help="simultaneous century page_views queries per wave")
    parser.add_argument("--waves", type=int, default=5)
    parser.add_argument("--baseline", type=float, default=10.0, help="seconds of the normal query alone")
    parser.add_argument("--sample-interval", type=float, default=0.05, help="seconds between RSS samples")
    parser.add_argument("--probe-timeout", type=float, default=5.0)
    parser.add_argument("--port", type=int, help="the API's port on the loopback interface (default: settings)")
    parser.add_argument("--pid", type=int, help="the API's pid (default: the state directory's run/api.pid)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure_logging()
    settings = get_settings()
    base = base_url(settings, args.port)
    pid = args.pid or api_pid(settings, args.port or settings.api.port)
    path, params = CENTURY_PAGE_VIEWS
    with httpx.Client(base_url=base, timeout=args.probe_timeout) as client:
        status, seconds = timed(client, path, params)
    if not isinstance(status, int) or not 400 <= status < 500:
        log.error(
            "one century query was not refused within %ss (got %s after %.1fs): this API does not bound "
            "queries; not sending it %d more",
            args.probe_timeout,
            status,
            seconds,
            args.concurrency,
        )
        return 2
    log.info("probe refused with %s in %.1f ms; %d waves of %d", status, seconds * 1000, args.waves, args.concurrency)
    result = run(base, pid, args)
    emit(result, report(result), args.json)
    ok = (
        result["api_alive"]
        and result["over_1s"] == 0
        and result["rss_peak_mb"] < 1024
        and all(s.startswith("4") for s in result["hostile"]["statuses"])
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
