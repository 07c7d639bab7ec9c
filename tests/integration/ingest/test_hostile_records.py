"""Hostile records on the real stack: 10,000 of them produced to `events` stop nothing. Every one is
in the dead-letter topic with its reason, the archiver and the speed layer keep running (the same
processes), and a normal workload sent after them is archived and counted exactly."""

from __future__ import annotations

import base64
import hashlib
import time
import uuid

import httpx
from kafka import KafkaProducer

from ingest.generator import GeneratorConfig
from tests.integration.ingest.test_archiver import dlq_records
from tests.support.events import VALID_KINDS, fresh_seed, send, wait_archived
from tests.support.hostile import CONFIRMED, corpus
from tests.support.realtime import wait_until_exact

HOSTILE_COUNT = 10_000


def produce_raw(settings, records) -> dict[tuple[int, int], tuple[str, bytes | None]]:
    producer = KafkaProducer(
        bootstrap_servers=settings.kafka.bootstrap, acks="all", linger_ms=20, max_request_size=2 * 1024 * 1024
    )
    futures = [
        (kind, value, producer.send(settings.kafka.events_topic, key=key, value=value)) for kind, key, value in records
    ]
    producer.flush(60)
    positions = {}
    for kind, value, future in futures:
        meta = future.get(60)
        positions[(meta.partition, meta.offset)] = (kind, value)
    producer.close()
    return positions


def job_pids(stack) -> dict[str, int]:
    out = {}
    for name in ("archiver", "speed-layer"):
        process = stack.supervisor.process(name)
        assert process is not None and process.is_running(), f"{name} runs before the test"
        out[name] = process.pid
    return out


def test_hostile_records_stop_nothing_and_all_reach_the_dead_letter_topic(settings, stack):
    pids = job_pids(stack)
    hostile = produce_raw(settings, corpus(seed=fresh_seed(), count=HOSTILE_COUNT))
    assert len(hostile) == HOSTILE_COUNT
    sent = send(
        settings,
        GeneratorConfig(
            seed=fresh_seed(),
            count=2_000,
            pages=20,
            url_prefix=f"/hostile-{uuid.uuid4().hex[:8]}",
            duplicate_fraction=0.05,
            late_fraction=0.1,
            late_min_s=3_600,
            late_max_s=86_400,
        ),
    )
    assert all(r.kind in VALID_KINDS for r in sent)

    # The normal records come after the hostile ones in every partition: archived means both were read.
    wait_archived(settings, sent, timeout_s=300)
    wait_until_exact(settings, sent, timeout_s=300)
    assert job_pids(stack) == pids, "the archiver and the speed layer are the processes they were before"

    letters = dlq_records(settings, set(hostile), timeout_s=120)
    missing = set(hostile) - set(letters)
    assert not missing, f"{len(missing)} hostile records are not in {settings.kafka.dlq_topic}, e.g. " + ", ".join(
        f"{hostile[p][0]}@{p}" for p in sorted(missing)[:5]
    )
    for position, found in letters.items():
        letter = found[0]
        assert letter["reason"], (hostile[position][0], letter)
        value = hostile[position][1]
        if value is None:
            assert letter["reason"] == "empty record: no value"
            assert letter["raw_bytes"] is None and letter["raw_sha256"] is None and "raw_base64" in letter, letter
            continue
        assert letter["raw_bytes"] == len(value)
        assert letter["raw_sha256"] == hashlib.sha256(value).hexdigest()
        kept = base64.b64decode(letter["raw_base64"])
        assert kept == value[: settings.events.max_dlq_raw_bytes]
        assert letter["raw_truncated"] == (len(value) > settings.events.max_dlq_raw_bytes)

    by_kind = {hostile[p][0]: letters[p][0]["reason"] for p in letters}
    assert by_kind["nested_4000_bytes"].startswith("too deeply nested")
    assert by_kind["lone_surrogate_url"].startswith("invalid Unicode: url")
    assert by_kind["year_one_plus_14"].startswith("mistyped field: event_time")
    assert by_kind["event_900_kb"].startswith("oversized")


def test_http_ingest_refuses_the_confirmed_records(settings, stack):
    import json

    base = f"http://{settings.api.host}:{settings.api.port}"
    headers = {"Authorization": f"Bearer {settings.api.token.get_secret_value()}", "Content-Type": "application/json"}
    for name in ("lone_surrogate_url", "year_one_plus_14"):
        body = b"[" + CONFIRMED[name] + b"]"
        response = httpx.post(f"{base}/api/v1/events", content=body, headers=headers, timeout=30)
        assert response.status_code == 422, (name, response.status_code, response.text)
        assert "accepted" not in response.json()
    response = httpx.post(
        f"{base}/api/v1/events", content=b"[" + CONFIRMED["nested_4000_bytes"] + b"]", headers=headers, timeout=30
    )
    assert 400 <= response.status_code < 500, response.text
    assert "too deeply nested" in response.text
    # An empty optional string means absent: the event is accepted, not its batch refused.
    doc = json.loads(CONFIRMED["year_one_plus_14"])
    doc.update(event_time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), referrer="", event_id=uuid.uuid4().hex)
    response = httpx.post(f"{base}/api/v1/events", json=[doc], headers=headers, timeout=30)
    assert response.status_code == 202, response.text
