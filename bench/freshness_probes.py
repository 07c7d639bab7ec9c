"""Speed-layer freshness (part 1 of bench/speed_freshness.py): probe page views sent among background
traffic, Cassandra polled until each probe's count is visible; percentiles of the delays."""

from __future__ import annotations

import json
import logging
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from figures import fmt, percentile  # bench/ itself: the scripts run as files
from generator_thread import Background  # bench/ itself

from definitions.events import SCHEMA_VERSION, format_time
from definitions.settings import Settings
from definitions.views import key_text
from ingest.generator import GeneratorConfig
from stores.clients import cassandra_cluster
from stores.realtime_schema import BY_KEY

log = logging.getLogger("bench.speed")


def summary(values: list[float]) -> dict:
    return {
        "count": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "min": min(values) if values else None,
        "max": max(values) if values else None,
        "mean": statistics.fmean(values) if values else None,
    }


@dataclass
class Probe:
    index: int
    url: str
    key: str
    sent_s: float  # wall clock just before send()
    appended_ms: int | None = None  # broker LogAppendTime
    acked_s: float | None = None
    visible_s: float | None = None
    error: str | None = None
    extra: dict = field(default_factory=dict)


def probe_document(url: str, user: str) -> dict:
    """A fresh page_view of `url` by `user`, timed now: one probe."""
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


def probe_event(url: str, user: str) -> bytes:
    return json.dumps(probe_document(url, user), separators=(",", ":")).encode()


def freshness(
    settings: Settings, run: str, rate: float, duration: float, interval: float, poll: float, timeout: float
) -> dict:
    from kafka import KafkaProducer

    cluster = cassandra_cluster(settings, timeout_s=10)
    session = cluster.connect()
    query = session.prepare(
        f"SELECT key, value FROM {settings.cassandra.keyspace}.{BY_KEY} WHERE view_name = 'page_views' AND granularity = 'minute' "
        "AND key IN ?"
    )
    producer = KafkaProducer(
        bootstrap_servers=settings.kafka.bootstrap, client_id="lambda-bench-probe", acks="all", linger_ms=0, retries=5
    )
    background = Background(
        settings,
        GeneratorConfig(
            seed=int(time.time()) % 100_000, count=int(rate * duration), rate=rate, url_prefix=f"/bench-bg-{run}"
        ),
    ).start()
    probes: list[Probe] = []
    user = f"bench-probe-{run}"
    lock = threading.Lock()

    def acked(probe: Probe, metadata) -> None:
        with lock:
            probe.appended_ms = metadata.timestamp
            probe.acked_s = time.time()

    def failed(probe: Probe, exc: Exception) -> None:
        with lock:
            probe.error = repr(exc)

    started = time.monotonic()
    next_probe = started + 1.0  # let the background traffic start first
    last_probe_due = started + duration
    deadline = last_probe_due + timeout
    polls = 0
    next_log = started + 10.0
    try:
        while time.monotonic() < deadline:
            now = time.monotonic()
            if now >= next_probe and now < last_probe_due:
                index = len(probes)
                url = f"/bench-fresh-{run}/{index}"
                probe = Probe(index, url, key_text([url]), time.time())
                future = producer.send(settings.kafka.events_topic, key=user.encode(), value=probe_event(url, user))
                future.add_callback(lambda md, p=probe: acked(p, md))
                future.add_errback(lambda exc, p=probe: failed(p, exc))
                probes.append(probe)
                next_probe += interval
            pending = [p for p in probes if p.visible_s is None and p.error is None]
            if pending:
                rows = session.execute(query, ([p.key for p in pending],))
                seen_s = time.time()
                polls += 1
                counts: dict[str, int] = {}
                for row in rows:
                    counts[row.key] = counts.get(row.key, 0) + row.value
                for p in pending:
                    if counts.get(p.key, 0) >= 1:
                        p.visible_s = seen_s
            elif now >= last_probe_due:
                break
            if now >= next_log:
                visible = [p.visible_s - p.appended_ms / 1000 for p in probes if p.visible_s and p.appended_ms]
                log.info(
                    "freshness: %d probes sent, %d visible (median so far %s s)",
                    len(probes),
                    len(visible),
                    fmt(percentile(visible, 50), 2),
                )
                next_log += 10.0
            time.sleep(max(0.0, poll - (time.monotonic() - now)))
        producer.flush(10)
        background.join(max(10.0, duration))
    finally:
        producer.close(10)
        cluster.shutdown()
    fresh_append = [p.visible_s - p.appended_ms / 1000 for p in probes if p.visible_s and p.appended_ms]
    fresh_send = [p.visible_s - p.sent_s for p in probes if p.visible_s]
    ack = [p.acked_s - p.sent_s for p in probes if p.acked_s]
    bg = background.report
    result = {
        "probes": len(probes),
        "visible": len(fresh_append),
        "not_visible": [p.url for p in probes if p.visible_s is None],
        "send_errors": [p.error for p in probes if p.error],
        "probe_interval_s": interval,
        "poll_interval_s": poll,
        "polls": polls,
        "background_rate_target": rate,
        "background_sent": bg.sent if bg else None,
        "background_rate_achieved": bg.rate if bg else None,
        "duration_s": duration,
        "freshness_from_append_s": summary(fresh_append),
        "freshness_from_send_s": summary(fresh_send),
        "produce_ack_s": summary(ack),
        "samples_s": [round(v, 3) for v in fresh_append],
    }
    return result
