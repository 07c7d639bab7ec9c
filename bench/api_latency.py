"""Query API latency and requests/s per route under concurrent clients, and end-to-end freshness.

1. Latency: for each query route, `--clients` threads (each its own httpx.Client, keep-alive,
   loopback only) send requests back to back for `--duration` s (each thread at most
   `--max-requests`); latency of every request, p50/p90/p99, and requests/s = successful answers /
   wall time. One untimed request per client first. The clients run on the same 2 cores as the
   stack, so they are part of the load. `/health` (which probes every store) only with
   `--with-health`.
2. Freshness end to end: `--probes` probe page views, one every `--probe-interval` s, each with
   its own URL /bench-api-<run>/<i>, posted through `POST /api/v1/events` (or produced to Kafka
   with `--probe-via kafka`); each probe's `GET /api/v1/views/page_views?url=<url>&granularity=minute`
   is polled every `--poll-interval` s until its `total` reaches 1. Freshness = first answer with
   the probe counted − the moment the POST was acknowledged (Kafka: the broker's LogAppendTime).

    .venv/bin/python bench/api_latency.py --json /tmp/bench_api.json

Needs the stack up (`lambdactl up`), the API and the speed layer included.
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
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import httpx
from figures import configure_logging, emit, fmt, int_list, percentile  # bench/ itself: the scripts run as files

from definitions.events import SCHEMA_VERSION, format_time
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


# --- 2. freshness end to end ---------------------------------------------------------------------


def probe_event(url: str, user: str) -> dict:
    return {
        "event_id": str(uuid.uuid4()),
        "event_time": format_time(datetime.now(UTC)),
        "user_id": user,
        "url": url,
        "event_type": "page_view",
        "referrer": None,
        "country": "US",
        "device": "desktop",
        "schema_version": SCHEMA_VERSION,
    }


def freshness(
    settings: Settings,
    base: str,
    run: str,
    probes: int,
    interval: float,
    poll: float,
    timeout: float,
    via: str,
    give_up_s: float = 30.0,
) -> dict:
    token = settings.api.token.get_secret_value()
    user = f"bench-api-{run}"
    sent: list[dict] = []
    producer = None
    if via == "kafka":
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=settings.kafka.bootstrap, client_id="lambda-bench-api", acks="all", linger_ms=0, retries=5
        )
    client = httpx.Client(base_url=base, timeout=30.0)
    pool = ThreadPoolExecutor(4)

    last_ok = {"t": time.monotonic()}

    def check(probe: dict) -> None:
        try:
            resp = client.get("/api/v1/views/page_views", params={"url": probe["url"], "granularity": "minute"})
        except httpx.HTTPError as exc:
            probe["poll_errors"] = probe.get("poll_errors", 0) + 1
            probe["last_error"] = repr(exc)
            return
        seen = time.time()
        if resp.status_code != 200:
            probe["poll_errors"] = probe.get("poll_errors", 0) + 1
            probe["last_error"] = f"{resp.status_code}: {resp.text[:200]}"
            return
        last_ok["t"] = time.monotonic()
        if (resp.json().get("total") or 0) >= 1 and probe.get("visible_s") is None:
            probe["visible_s"] = seen

    started = time.monotonic()
    next_probe = started
    deadline = started + probes * interval + timeout
    next_log = started + 10
    try:
        while time.monotonic() < deadline:
            now = time.monotonic()
            if len(sent) < probes and now >= next_probe:
                url = f"/bench-api-{run}/{len(sent)}"
                event = probe_event(url, user)
                probe = {"url": url, "sent_s": time.time()}
                try:
                    if producer is not None:
                        md = producer.send(
                            settings.kafka.events_topic,
                            key=user.encode(),
                            value=json.dumps(event, separators=(",", ":")).encode(),
                        ).get(timeout=30)
                        probe["acked_s"] = md.timestamp / 1000
                    else:
                        resp = client.post("/api/v1/events", json=[event], headers={"Authorization": f"Bearer {token}"})
                        if resp.status_code != 202:
                            raise RuntimeError(f"POST /api/v1/events answered {resp.status_code}: {resp.text[:300]}")
                        probe["acked_s"] = time.time()
                except Exception as exc:
                    probe["error"] = repr(exc)
                    log.warning("probe %s not sent: %s", url, exc)
                sent.append(probe)
                next_probe += interval
            pending = [p for p in sent if p.get("visible_s") is None and "error" not in p]
            if pending:
                list(pool.map(check, pending))
            elif len(sent) >= probes:
                break
            if now - last_ok["t"] > give_up_s:
                raise RuntimeError(
                    f"no successful answer from GET page_views for {give_up_s:.0f}s; last error: "
                    f"{next((p['last_error'] for p in reversed(sent) if 'last_error' in p), '?')}"
                )
            if now >= next_log:
                log.info("freshness: %d probes sent, %d visible", len(sent), sum(1 for p in sent if p.get("visible_s")))
                next_log += 10
            time.sleep(max(0.0, poll - (time.monotonic() - now)))
    finally:
        pool.shutdown()
        client.close()
        if producer is not None:
            producer.close(10)
    fresh = [p["visible_s"] - p["acked_s"] for p in sent if p.get("visible_s") and p.get("acked_s")]
    post = [p["acked_s"] - p["sent_s"] for p in sent if p.get("acked_s")] if via == "api" else []
    return {
        "via": via,
        "probes": len(sent),
        "visible": len(fresh),
        "not_visible": [p["url"] for p in sent if not p.get("visible_s")],
        "send_errors": [p["error"] for p in sent if "error" in p],
        "poll_errors": sum(p.get("poll_errors", 0) for p in sent),
        "probe_interval_s": interval,
        "poll_interval_s": poll,
        "p50_s": percentile(fresh, 50),
        "p95_s": percentile(fresh, 95),
        "p99_s": percentile(fresh, 99),
        "min_s": min(fresh) if fresh else None,
        "max_s": max(fresh) if fresh else None,
        "post_p50_ms": percentile([x * 1000 for x in post], 50),
        "samples_s": [round(x, 3) for x in fresh],
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
            f"every {f['probe_interval_s']} s, polled every {f['poll_interval_s']} s:"
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
    parser.add_argument("--probe-interval", type=float, default=1.0)
    parser.add_argument("--poll-interval", type=float, default=0.25)
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
