"""Freshness end to end: how long after an event is acknowledged (by POST /api/v1/events, or by
Kafka) the merged answer of GET page_views counts it; run by bench/api_latency.py and
bench/stack_startup.py.

Probes leave at random phases: the gaps between them are drawn uniformly from half to one and a
half `interval` (seeded). Sent at a fixed interval equal to the speed layer's trigger (both 1 s by
default), every probe met the trigger at the same phase, and the figures said what one phase waits,
not what an event waits."""

from __future__ import annotations

import json
import logging
import random
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from figures import percentile  # bench/ itself: the scripts run as files
from freshness_probes import probe_document

from definitions.settings import Settings

log = logging.getLogger("bench.api")


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
    seed: int = 0,
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
    gaps = random.Random(seed)

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
                event = probe_document(url, user)
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
                next_probe += interval * gaps.uniform(0.5, 1.5)
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
        "probe_interval_s": interval,  # the mean gap: each is drawn from half to one and a half of it
        "poll_interval_s": poll,
        "p50_s": percentile(fresh, 50),
        "p95_s": percentile(fresh, 95),
        "p99_s": percentile(fresh, 99),
        "min_s": min(fresh) if fresh else None,
        "max_s": max(fresh) if fresh else None,
        "post_p50_ms": percentile([x * 1000 for x in post], 50),
        "samples_s": [round(x, 3) for x in fresh],
    }
