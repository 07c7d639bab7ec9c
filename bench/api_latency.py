"""Query API latency and requests/s per route under concurrent clients, and end-to-end freshness.

1. Latency: for each query route, `--clients` threads (each its own httpx.Client, keep-alive,
   loopback only) send requests back to back for `--duration` s (each thread at most
   `--max-requests`); latency of every request, p50/p90/p99, and requests/s = successful answers /
   wall time. One untimed request per client first. The clients run on the same 2 cores as the
   stack, so they are part of the load. `/health` (which probes every store) only with
   `--with-health`.
2. Freshness end to end: `--probes` probe page views, at random gaps of half to one and a half
   `--probe-interval` s (at a fixed one every probe would meet the speed layer's trigger at one phase), each with
   its own URL /bench-api-<run>/<i>, posted through `POST /api/v1/events` (or produced to Kafka
   with `--probe-via kafka`); each probe's `GET /api/v1/views/page_views?url=<url>&granularity=minute`
   is polled every `--poll-interval` s until its `total` reaches 1. Freshness = first answer with
   the probe counted − the moment the POST was acknowledged (Kafka: the broker's LogAppendTime).

    .venv/bin/python bench/api_latency.py --json /tmp/bench_api.json

Needs the stack up (`lambdactl up`), the API and the speed layer included.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx
from api_freshness import freshness  # bench/ itself: the scripts run as files
from figures import configure_logging, emit, fmt, int_list, percentile

from definitions.settings import Settings, get_settings

log = logging.getLogger("bench.api")

ROUTES: dict[str, str] = {
    "page_views": "/api/v1/views/page_views?url=/&granularity=hour",
    "unique_visitors": "/api/v1/views/unique_visitors?url=/&granularity=hour",
    "top_pages": "/api/v1/views/top_pages?granularity=hour&limit=10",
    "page_views_by_country_device": "/api/v1/views/page_views_by_country_device?country=US&device=mobile&granularity=day",
    "status": "/api/v1/status",
}
HEALTH = {"health": "/health"}


def base_url(settings: Settings, port: int | None = None) -> str:
    host = settings.api.host
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"api.host is {host}: this benchmark only loads an API on the loopback interface")
    return f"http://{host}:{port or settings.api.port}"


# --- 1. latency under load --------------------------------------------------------------------------


def load_route(base: str, path: str, clients: int, duration: float, max_requests: int) -> dict:
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[dict[str, int]] = [{} for _ in range(clients)]
    samples: dict[str, str] = {}  # one answer per kind of error
    state = {"started": 0.0, "deadline": 0.0}

    def go() -> None:  # run by one thread when all have arrived, before any is released
        state["started"] = time.perf_counter()
        state["deadline"] = state["started"] + duration

    ready = threading.Barrier(clients + 1, action=go)

    def worker(i: int) -> None:
        with httpx.Client(base_url=base, timeout=30.0) as client:
            try:
                client.get(path)  # untimed: opens the connection
            except httpx.HTTPError:
                pass
            ready.wait()
            deadline = state["deadline"]
            mine, bad = latencies[i], errors[i]
            for _ in range(max_requests):
                if time.perf_counter() >= deadline:
                    break
                started = time.perf_counter()
                try:
                    resp = client.get(path)
                    elapsed = time.perf_counter() - started
                    if resp.status_code == 200:
                        mine.append(elapsed)
                    else:
                        bad[str(resp.status_code)] = bad.get(str(resp.status_code), 0) + 1
                        samples.setdefault(str(resp.status_code), resp.text[:300])
                except httpx.HTTPError as exc:
                    bad[type(exc).__name__] = bad.get(type(exc).__name__, 0) + 1
                    samples.setdefault(type(exc).__name__, str(exc)[:300])

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    ready.wait()  # every client connected: the clock starts
    for t in threads:
        t.join(duration + 120)
    wall = time.perf_counter() - state["started"]
    all_ms = [x * 1000 for per in latencies for x in per]
    error_counts: dict[str, int] = {}
    for per in errors:
        for k, v in per.items():
            error_counts[k] = error_counts.get(k, 0) + v
    return {
        "path": path,
        "clients": clients,
        "seconds": wall,
        "ok": len(all_ms),
        "errors": error_counts,
        "error_samples": samples,
        "requests_per_s": len(all_ms) / wall if wall > 0 else None,
        "p50_ms": percentile(all_ms, 50),
        "p90_ms": percentile(all_ms, 90),
        "p99_ms": percentile(all_ms, 99),
        "max_ms": max(all_ms) if all_ms else None,
        "mean_ms": statistics.fmean(all_ms) if all_ms else None,
    }


# --- main -----------------------------------------------------------------------------------------
def report(result: dict) -> str:
    lines = []
    if result.get("routes"):
        lines.append(
            f"Query API latency under load ({result['duration_s']:.0f} s per route and client count, "
            f"httpx clients in threads on the same machine):"
        )
        lines.append(
            f"{'route':<30} {'clients':>7} {'req/s':>8} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} "
            f"{'ok':>7} {'errors':>7}"
        )
        for r in result["routes"]:
            errors = sum(r["errors"].values())
            lines.append(
                f"{r['route']:<30} {r['clients']:>7} {fmt(r['requests_per_s'], 1):>8} "
                f"{fmt(r['p50_ms'], 1):>8} {fmt(r['p90_ms'], 1):>8} {fmt(r['p99_ms'], 1):>8} {fmt(r['max_ms'], 0):>8} "
                f"{r['ok']:>7,} {errors:>7,}"
            )
            for kind, count in r["errors"].items():
                lines.append(f"{'':<30} {count:,} x {kind}: {r['error_samples'].get(kind, '')[:200]}")
    f = result.get("freshness")
    if f:
        how = "POST /api/v1/events acknowledged" if f["via"] == "api" else "Kafka LogAppendTime"
        lines.append(
            f"Freshness end to end ({how} -> GET page_views?granularity=minute counts it), {f['probes']} probes "
            f"every {f['probe_interval_s']} s on average (random gaps), polled every {f['poll_interval_s']} s:"
        )
        lines.append(
            f"  p50 {fmt(f['p50_s'], 2)} s   p95 {fmt(f['p95_s'], 2)} s   p99 {fmt(f['p99_s'], 2)} s   "
            f"(min {fmt(f['min_s'], 2)}, max {fmt(f['max_s'], 2)}; {f['visible']}/{f['probes']} visible"
            + (f"; POST p50 {fmt(f['post_p50_ms'], 1)} ms" if f["post_p50_ms"] is not None else "")
            + (f"; {f['poll_errors']} poll errors" if f["poll_errors"] else "")
            + ")"
        )
    for name, error in result.get("errors", {}).items():
        lines.append(f"{name}: FAILED: {error}")
    if result.get("api_ingest_bucket_s") != result.get("settings_ingest_bucket_s"):
        lines.append(
            f"WARNING: the API runs with ingest_bucket_s={result.get('api_ingest_bucket_s')}, the benchmark's "
            f"settings say {result.get('settings_ingest_bucket_s')}"
        )
    if result.get("api_batch_error"):
        lines.append(f"WARNING: the API's /api/v1/status reports: {result['api_batch_error']}")
    lines.append(f"(load average {', '.join(f'{x:.1f}' for x in result['load_average'])} on {os.cpu_count()} cores)")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--clients", type=int_list, default=[8], help="concurrent clients, comma-separated list (e.g. 1,8)"
    )
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per route and client count")
    parser.add_argument(
        "--max-requests", type=int, default=1_000_000, help="upper bound of requests per client and route"
    )
    parser.add_argument(
        "--routes", default=",".join(ROUTES), help=f"comma-separated among {', '.join([*ROUTES, *HEALTH])}"
    )
    parser.add_argument("--with-health", action="store_true", help="also load /health (it probes every store)")
    parser.add_argument("--probes", type=int, default=20, help="freshness probes; 0 skips the freshness test")
    parser.add_argument("--probe-interval", type=float, default=1.0, help="mean seconds between probes")
    parser.add_argument("--poll-interval", type=float, default=0.05, help="seconds between polls of a pending probe")
    parser.add_argument("--probe-timeout", type=float, default=120.0)
    parser.add_argument("--probe-via", choices=("api", "kafka"), default="api")
    parser.add_argument("--port", type=int, help="the API's port on the loopback interface (default: settings)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure_logging()
    settings = get_settings()
    base = base_url(settings, args.port)
    known = {**ROUTES, **HEALTH}
    names = [n.strip() for n in args.routes.split(",") if n.strip()]
    if args.with_health and "health" not in names:
        names.append("health")
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown route(s) {unknown}; known: {', '.join(known)}")

    result: dict = {"base_url": base, "duration_s": args.duration, "clients": args.clients, "routes": [], "errors": {}}
    loads = [os.getloadavg()[0]]
    status = 0
    try:
        httpx.get(f"{base}/api/v1/views", timeout=30).raise_for_status()
        api_status = httpx.get(f"{base}/api/v1/status", timeout=30).json()
    except (httpx.HTTPError, ValueError) as exc:
        log.error("the API does not answer on %s: %s", base, exc)
        return 2
    result["api_ingest_bucket_s"] = api_status.get("ingest_bucket_s")
    if result["api_ingest_bucket_s"] != settings.ingest_bucket_s:
        log.warning(
            "the API runs with ingest_bucket_s=%s, these settings say %s: its view answers may be refused",
            result["api_ingest_bucket_s"],
            settings.ingest_bucket_s,
        )
    result["settings_ingest_bucket_s"] = settings.ingest_bucket_s
    batch = api_status.get("batch") or {}
    result["api_batch_error"] = batch.get("error")
    if "error" in batch:
        log.warning("the API cannot read the batch views: %s", batch["error"])
    for name in names:
        for clients in args.clients:
            try:
                row = {"route": name, **load_route(base, known[name], clients, args.duration, args.max_requests)}
                result["routes"].append(row)
                log.info(
                    "%s, %d clients: %.1f req/s, p50 %s ms, p99 %s ms, %d errors",
                    name,
                    clients,
                    row["requests_per_s"] or 0,
                    fmt(row["p50_ms"], 1),
                    fmt(row["p99_ms"], 1),
                    sum(row["errors"].values()),
                )
                if not row["ok"]:
                    status = 1
            except Exception as exc:
                log.exception("route %s failed", name)
                result["errors"][f"{name}/{clients}"] = f"{type(exc).__name__}: {exc}"
                status = 1
            loads.append(os.getloadavg()[0])
    if args.probes > 0:
        run = f"{int(time.time())}-{os.getpid()}"
        try:
            log.info("freshness: %d probes via %s, one every %.1fs", args.probes, args.probe_via, args.probe_interval)
            result["freshness"] = freshness(
                settings,
                base,
                run,
                args.probes,
                args.probe_interval,
                args.poll_interval,
                args.probe_timeout,
                args.probe_via,
            )
            fresh = result["freshness"]
            if fresh["visible"] < fresh["probes"]:  # its percentiles leave the probes never seen out
                log.error(
                    "freshness: %d of %d probes never became visible",
                    fresh["probes"] - fresh["visible"],
                    fresh["probes"],
                )
                result["errors"]["freshness"] = (
                    f"{fresh['probes'] - fresh['visible']} of {fresh['probes']} probes not visible"
                )
                status = 1
        except Exception as exc:
            log.exception("freshness failed")
            result["errors"]["freshness"] = f"{type(exc).__name__}: {exc}"
            status = 1
        loads.append(os.getloadavg()[0])
    result["load_average"] = loads
    emit(result, report(result), args.json)
    return status


if __name__ == "__main__":
    sys.exit(main())
