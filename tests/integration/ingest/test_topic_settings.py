"""`lambdactl bootstrap` on topics that already exist, on the real Kafka: a topic stamped by its
producers (CreateTime) is changed to LogAppendTime, the platform's time model, a compacted one to
deletion by retention only, and each keeps its other settings. Kafka's AlterConfigs replaces a topic's whole configuration: every other override (here
`max.message.bytes`) went back to the broker's default, silently. Scratch topics of the test's own."""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from definitions.settings import KafkaSettings
from stores.clients import kafka_admin
from stores.kafka_topic_config import check_timestamp_type, ensure_topics


def configs(admin, name: str) -> dict[str, str]:
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    return {e[0]: e[1] for response in described for resource in response.resources for e in resource[4]}


def scratch_topics(settings):
    """(events topic, dead-letter topic, settings naming them): names of the test's own."""
    unique = uuid.uuid4().hex[:8]
    events, dlq = f"test-events-{unique}", f"test-dlq-{unique}"
    kafka = settings.kafka.model_dump()
    scratch = settings.model_copy(
        update={"kafka": KafkaSettings.model_validate({**kafka, "events_topic": events, "dlq_topic": dlq})}
    )
    return events, dlq, scratch


def test_an_existing_topic_gets_log_append_time_and_keeps_its_other_settings(settings, stack):
    events, dlq, scratch = scratch_topics(settings)
    admin = kafka_admin(settings, client_id=f"test-topics-{events}")
    try:
        admin.create_topics(
            [
                NewTopic(
                    name,
                    num_partitions=1,
                    replication_factor=1,
                    topic_configs={
                        "message.timestamp.type": "CreateTime",
                        "max.message.bytes": "123456",
                        "cleanup.policy": "compact",
                    },
                )
                for name in (events, dlq)
            ]
        )
        with pytest.raises(RuntimeError, match=f"topic {events} has message.timestamp.type=CreateTime.*kafka-configs"):
            check_timestamp_type(scratch)  # what the archiver and the speed layer ask before they start
        assert ensure_topics(scratch) == [], "both existed"
        check_timestamp_type(scratch)
        for name in (events, dlq):
            now = configs(admin, name)
            assert now["message.timestamp.type"] == "LogAppendTime", (name, now)
            assert now["cleanup.policy"] == "delete", f"{name}: compaction deletes records no job read"
            assert now["max.message.bytes"] == "123456", f"{name}: its other setting was reset"
            assert now["retention.ms"] == str(settings.kafka.retention_hours * 3_600_000)
    finally:
        try:
            admin.delete_topics([events, dlq])
        finally:
            admin.close()


def test_a_topic_that_is_not_there_is_refused_naming_it(settings, stack):
    """Kafka answers an error for the topic: one that does not exist would be created by the job's
    consumer with the brokers' default type (auto-creation is on by default on a cluster)."""
    missing = f"test-missing-{uuid.uuid4().hex[:8]}"
    kafka = settings.kafka.model_dump()
    scratch = settings.model_copy(update={"kafka": KafkaSettings.model_validate({**kafka, "events_topic": missing})})
    with pytest.raises(RuntimeError, match=f"topic {missing}'s configuration cannot be read .*create it"):
        check_timestamp_type(scratch)


def test_a_compressed_record_larger_than_the_topic_allows_is_refused_when_produced(settings, stack):
    """A 30 KB zstd batch held a record of 1 GiB of zeros: the broker kept it as compressed, and
    every Java consumer (the archiver, the speed layer: Spark's Kafka source) allocated the record
    whole and died of OutOfMemoryError, again at every restart. Topics the platform makes are stored
    uncompressed: the broker decompresses each batch and refuses one whose records pass
    max.message.bytes. An existing topic is brought to it; compressed records of normal size are
    still accepted and read back."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    events, dlq, scratch = scratch_topics(settings)
    admin = kafka_admin(settings, client_id=f"test-bomb-{events}")
    admin.create_topics(
        [
            NewTopic(
                name,
                1,
                1,
                topic_configs={
                    "message.timestamp.type": "LogAppendTime",
                    "compression.type": "producer",
                    "retention.ms": "2592000000",  # the operator's own: 30 days
                },
            )
            for name in (events, dlq)
        ]
    )
    send = KafkaProducer(
        bootstrap_servers=settings.kafka.bootstrap,
        compression_type="zstd",
        max_request_size=64 * 1024 * 1024,  # the client's own check is of the record before compression
        buffer_memory=256 * 1024 * 1024,
        retries=0,
    )
    try:
        assert ensure_topics(scratch) == [], "both existed"
        for name in (events, dlq):
            now = configs(admin, name)
            assert now["compression.type"] == "uncompressed", name
            assert now["retention.ms"] == "2592000000", f"{name}: the operator's retention was reset"
        with pytest.raises(KafkaError) as refused:
            send.send(events, value=bytes(16 * 1024 * 1024)).get(timeout=60)
        assert "MessageSizeTooLarge" in type(refused.value).__name__, refused.value
        event = b'{"event_id": "e-1", "url": "/a"}' * 100
        offset = send.send(events, value=event).get(timeout=60).offset
        read = KafkaConsumer(
            bootstrap_servers=settings.kafka.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=15_000
        )
        try:
            read.assign([TopicPartition(events, 0)])
            values = [r.value for r in read]
        finally:
            read.close()
        assert values == [event] and offset == 0, "nothing of the refused batch was stored"
    finally:
        send.close()
        try:
            admin.delete_topics([events, dlq])
        finally:
            admin.close()


def test_a_topic_kafka_describes_no_partition_of_is_no_count_of_zero(settings, stack):
    """The completeness marker expects as many partitions as the topic has: counted as 0 (a topic-level
    error in the answer), it expected none, and any one partition's progress passed for the topic's."""
    from stores.kafka_topic_config import NoPartitions, partition_count

    assert partition_count(settings, settings.kafka.events_topic) >= 1
    with pytest.raises(NoPartitions, match="no partition of topic test-absent-"):
        partition_count(settings, f"test-absent-{uuid.uuid4().hex[:8]}")
