"""POST /api/v1/events while Kafka cannot take some records, on the real Kafka: a request waits for
its own records only, and events answered 503 are not written later behind the client's back.

A topic deleted after the producer learned its partitions is one whose writes Kafka does not take,
with a retriable error (as a partition without a leader): the producer retries them until its
delivery timeout. Scratch topics of the test's own; the app runs in the test's process, with the
serving layer a tripwire (POST /events never reaches it)."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

import pytest
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from definitions.events import format_time
from definitions.settings import KafkaSettings
from stores.clients import kafka_admin
from stores.kafka import consumer, partition, producer
from tests.support.tripwire_api import assert_error_shape, make_client, token


@pytest.fixture
def topics(settings, stack):
    """(settings whose events topic is a scratch one, admin, scratch topic names made)."""
    unique = uuid.uuid4().hex[:8]
    events = f"test-ingest-{unique}"
    scratch = settings.model_copy(
        update={"kafka": KafkaSettings.model_validate({**settings.kafka.model_dump(), "events_topic": events})}
    )
    admin = kafka_admin(settings, client_id=f"test-{events}")
    made: list[str] = []

    def make(name: str) -> str:
        deadline = time.monotonic() + 60
        while True:  # a topic just deleted is made again once Kafka has finished deleting it
            try:
                admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
                break
            except TopicAlreadyExistsError:
                assert time.monotonic() < deadline, f"topic {name} still being deleted after 60s"
                time.sleep(0.2)
        made.append(name)
        return name

    try:
        yield scratch, admin, make
    finally:
        try:
            left = set(made) & set(admin.list_topics())
            if left:
                admin.delete_topics(sorted(left))
        finally:
            admin.close()


def delete(admin, name: str) -> None:
    admin.delete_topics([name])
    deadline = time.monotonic() + 60
    while name in admin.list_topics():
        assert time.monotonic() < deadline, f"topic {name} not deleted after 60s"
        time.sleep(0.2)


def end_offset(settings, topic: str) -> int:
    client = consumer(settings, "test-ingest-end")
    try:
        tp = partition(topic, 0)
        return client.end_offsets([tp])[tp]
    finally:
        client.close()


def make_event() -> dict:
    now = format_time(datetime.now(UTC))
    return {"event_id": str(uuid.uuid4()), "event_time": now, "user_id": "u-ingest", "url": "/x", "event_type": "click"}


def post(client, settings, events):
    return client.post("/api/v1/events", json=events, headers={"Authorization": f"Bearer {token(settings)}"})


def test_a_request_does_not_wait_for_another_requests_records(topics):
    """Before: one request's flush waited for every record the worker's producer held, so a record
    Kafka would not take (another request's partition) made every POST a 503 after 10 s, events
    stored and all, and the client's re-send a duplicate."""
    scratch, admin, make = topics
    make(scratch.kafka.events_topic)
    stuck = make(f"{scratch.kafka.events_topic}-stuck")
    for client in make_client(scratch):
        producer = client.app.state.producer()
        producer.send(stuck, value=b"{}").get(timeout=30)  # the producer knows the topic's partitions
        delete(admin, stuck)
        held = producer.send(stuck, value=b"{}")  # another request's record, retried by the producer
        started = time.monotonic()
        resp = post(client, scratch, [make_event()])
        waited = time.monotonic() - started
        assert resp.status_code == 202, resp.text
        assert waited < 5, f"the request waited {waited:.1f}s for a record not its own"
        assert not held.is_done, f"the other record was answered: {held.exception if held.failed() else held.value}"
        assert end_offset(scratch, scratch.kafka.events_topic) == 1


def test_events_answered_503_are_not_written_later(topics, monkeypatch):
    """Before: a 503's records stayed in the producer for its default two minutes of retries and were
    written when Kafka took them again, after the client was told to send them again. Now a record
    is given up when its request is answered: the 503 comes from the records' own delivery timeout.
    """
    from api.routes import events as route

    monkeypatch.setattr(route, "KAFKA_ACK_S", 3.0)
    scratch, admin, make = topics
    topic = make(scratch.kafka.events_topic)
    for client in make_client(scratch):
        assert post(client, scratch, [make_event()]).status_code == 202  # the producer knows the topic
        delete(admin, topic)
        started = time.monotonic()
        resp = post(client, scratch, [make_event(), make_event()])
        waited = time.monotonic() - started
        body = assert_error_shape(resp, scratch, 503)
        assert body["component"] == "kafka"
        assert "same event_id" in body["detail"], body
        assert int(resp.headers["retry-after"]) >= 1
        assert waited < 3.0 + 2, f"answered after {waited:.1f}s"
        make(topic)  # Kafka takes writes again: a record the producer still held would now be written
        probe = producer(scratch, "test-ingest-probe")
        try:
            probe.send(topic, value=b"{}").get(timeout=30)  # the topic takes writes again
        finally:
            probe.close()
        client.app.state.producer().flush(timeout=30)  # every record it held is written or given up
        assert end_offset(scratch, topic) == 1, "records answered 503 were written after all"
