"""The ticker ticks a partition added to `events` within about a tick, on the real Kafka: it read the
partitions from its producer's metadata, refreshed every five minutes, and until a partition has a
tick or an event the completeness of the whole topic stays unknown (every batch run waits).
A scratch topic of the test's own."""

from __future__ import annotations

import time
import uuid

from kafka.admin import NewPartitions

from definitions.settings import KafkaSettings
from ingest.ticker import Ticker
from stores.kafka import consumer, partition
from tests.support.kafka_topics import scratch_topic
from tests.support.polling import wait_for


def ticks(settings, topic: str, number: int) -> int:
    client = consumer(settings, "test-ticker-partitions")
    try:
        tp = partition(topic, number)
        return client.end_offsets([tp])[tp]
    finally:
        client.close()


def test_a_partition_added_is_ticked_within_a_few_ticks(settings, stack):
    from stores.clients import kafka_admin

    name = f"test-ticks-{uuid.uuid4().hex[:8]}"
    with scratch_topic(settings, name) as topic:
        kafka = KafkaSettings.model_validate({**settings.kafka.model_dump(), "events_topic": topic})
        archiver = settings.archiver.model_copy(update={"tick_interval_s": 1.0})
        ticker = Ticker(settings.model_copy(update={"kafka": kafka, "archiver": archiver}))
        ticker.start()
        try:
            wait_for(lambda: ticks(settings, topic, 0) > 0, timeout_s=60, what="the first tick")
            admin = kafka_admin(settings, client_id=f"test-{name}")
            try:
                admin.create_partitions({topic: NewPartitions(total_count=2)})
            finally:
                admin.close()
            added = time.monotonic()
            wait_for(lambda: ticks(settings, topic, 1) > 0, timeout_s=60, interval_s=0.5, what="a tick in partition 1")
            assert time.monotonic() - added < 30
        finally:
            ticker.stop()
            ticker.join(30)
