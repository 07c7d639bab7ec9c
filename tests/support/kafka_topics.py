"""A Kafka topic of a test's own, so that what it writes never reaches the platform's topics."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from stores.clients import kafka_admin


@contextlib.contextmanager
def scratch_topic(settings, name: str) -> Iterator[str]:
    from kafka.admin import NewTopic

    admin = kafka_admin(settings, client_id=f"test-{name}")
    try:
        admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
        yield name
    finally:
        try:
            admin.delete_topics([name])
        finally:
            admin.close()


def round_trip(settings, topic: str, payload: bytes, client_id: str, timeout_ms: int = 15_000) -> int:
    """Write `payload` to partition 0 of `topic` and read it back, both with the clients `settings`
    make (stores.kafka); the offset it was written at. Fails when what is read differs."""
    from stores.kafka import consumer, partition, producer

    send = producer(settings, client_id)
    try:
        sent = send.send(topic, value=payload, partition=0).get(timeout=30)
    finally:
        send.close()
    read = consumer(settings, client_id)
    try:
        tp = partition(topic, 0)
        read.assign([tp])
        read.seek(tp, sent.offset)
        records = read.poll(timeout_ms=timeout_ms, max_records=1).get(tp, [])
        assert records and records[0].value == payload, records
    finally:
        read.close()
    return sent.offset
