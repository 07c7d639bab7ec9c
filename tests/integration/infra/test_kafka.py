"""Kafka through kafka-python, the client the platform produces and consumes with."""

from __future__ import annotations

import json

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from stores.clients import kafka_admin


def test_keyed_records_round_trip(settings, stack, unique):
    topic = f"test-roundtrip-{unique}"
    admin = kafka_admin(settings)
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    admin.close()

    sent = [(f"user-{i % 7}", {"n": i}) for i in range(200)]
    producer = KafkaProducer(
        bootstrap_servers=settings.kafka.bootstrap,
        key_serializer=str.encode,
        value_serializer=lambda v: json.dumps(v).encode(),
        acks="all",
    )
    for key, value in sent:
        producer.send(topic, key=key, value=value)
    producer.flush()
    producer.close()

    consumer = KafkaConsumer(
        bootstrap_servers=settings.kafka.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=10_000,
        key_deserializer=bytes.decode,
        value_deserializer=json.loads,
    )
    consumer.assign([TopicPartition(topic, p) for p in range(3)])
    received = [(msg.key, msg.value, msg.partition) for msg in consumer]
    consumer.close()

    assert sorted((k, v["n"]) for k, v, _ in received) == sorted((k, v["n"]) for k, v in sent)
    # The same key always lands in the same partition, so per-user order is kept.
    partitions_by_key: dict[str, set[int]] = {}
    for key, _, partition in received:
        partitions_by_key.setdefault(key, set()).add(partition)
    assert all(len(parts) == 1 for parts in partitions_by_key.values())
    order = [v["n"] for k, v, _ in received if k == "user-3"]
    assert order == sorted(order)


def test_platform_topics_exist_with_log_append_time(settings, stack):
    admin = kafka_admin(settings)
    try:
        topics = {t["topic"]: t for t in admin.describe_topics([settings.kafka.events_topic, settings.kafka.dlq_topic])}
        assert len(topics[settings.kafka.events_topic]["partitions"]) == settings.kafka.partitions
        assert settings.kafka.dlq_topic in topics
        for name in topics:
            described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
            entries = {e[0]: e[1] for r in described for res in r.resources for e in res[4]}
            assert entries["message.timestamp.type"] == "LogAppendTime", name
    finally:
        admin.close()
