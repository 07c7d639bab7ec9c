"""A replay reads Kafka spans of some partitions only (speed_layer.replay drops the empty ones), on
the real Kafka and local Spark: Spark's Kafka reader refuses offsets that name part of a subscribed
topic's partitions ("you must specify all TopicPartitions"), so a replay whose look-back held no
record in one partition (the archiver's ticks stopped during the outage it follows) failed, and so
did every `--resume`. A scratch topic of the test's own."""

from __future__ import annotations

from stores.clients import kafka_admin
from stores.kafka import producer
from stores.kafka_source import kafka_range
from tests.integration.ingest.test_topic_settings import scratch_topics


def test_a_span_of_one_partition_of_several_is_read(spark, settings, stack):
    from kafka.admin import NewTopic

    events, _dlq, scratch = scratch_topics(settings)
    admin = kafka_admin(settings, client_id=f"test-replay-read-{events}")
    try:
        admin.create_topics([NewTopic(events, num_partitions=2, replication_factor=1)])
        sender = producer(settings, client_id=f"test-replay-read-{events}")
        for n in range(5):
            sender.send(events, value=f"record {n}".encode(), partition=1)
        sender.send(events, value=b"other partition", partition=0)
        sender.flush()
        sender.close()
        read = kafka_range(spark, scratch, {1: (1, 4)})
        got = sorted((r["partition"], r["offset"], bytes(r["value"])) for r in read.collect())
        assert got == [(1, n, f"record {n}".encode()) for n in (1, 2, 3)]
    finally:
        try:
            admin.delete_topics([events])
        finally:
            admin.close()
