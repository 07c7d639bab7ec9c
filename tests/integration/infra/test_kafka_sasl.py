"""SASL settings reach real Kafka clients: the local broker's SASL_PLAINTEXT listener (user
`lambda`, PLAIN) accepts kafka-python and Spark's Kafka source configured only through the
`kafka.*` settings, and refuses a wrong password with an authentication error."""

from __future__ import annotations

import json

import pytest
from kafka.errors import KafkaError

from definitions.store_connections import KafkaSettings
from infra.store_services import LOCAL_SASL_USER, local_sasl_password
from stores.clients import kafka_spark_options
from stores.kafka import producer
from tests.support.kafka_topics import round_trip, scratch_topic


def over_sasl(settings, password: str):
    k = settings.kafka
    if not k.sasl_listener_port:
        pytest.skip("kafka.sasl_listener_port is 0: the local broker has no SASL listener")
    kafka = KafkaSettings(
        **{
            **k.model_dump(),
            "bootstrap_servers": [f"{k.host}:{k.sasl_listener_port}"],
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_username": LOCAL_SASL_USER,
            "sasl_password": password,
        }
    )
    return settings.model_copy(update={"kafka": kafka})


def test_kafka_python_and_spark_read_and_write_over_sasl(settings, stack, spark, unique):
    chosen = over_sasl(settings, local_sasl_password(settings))
    with scratch_topic(settings, f"test-sasl-{unique}") as topic:
        payload = f"sasl-{unique}".encode()
        offset = round_trip(chosen, topic, payload, f"test-sasl-{unique}")
        # Spark's own Kafka client (Java), with the JAAS configuration the settings make.
        offsets = json.dumps({topic: {"0": offset}})
        ends = json.dumps({topic: {"0": offset + 1}})
        rows = (
            spark.read.format("kafka")
            .options(**kafka_spark_options(chosen))
            .option("assign", json.dumps({topic: [0]}))
            .option("startingOffsets", offsets)
            .option("endingOffsets", ends)
            .load()
            .select("value")
            .collect()
        )
        assert [bytes(r.value) for r in rows] == [payload]


def test_a_wrong_password_is_refused_with_an_authentication_error(settings, stack, unique, caplog):
    """kafka-python gives up with a timeout; the broker's refusal is in its log, in words."""
    chosen = over_sasl(settings, "not-the-password")
    with scratch_topic(settings, f"test-sasl-bad-{unique}") as topic, pytest.raises(KafkaError):
        send = producer(chosen, f"test-sasl-bad-{unique}", max_block_ms=10_000)
        try:
            send.send(topic, value=b"x", partition=0).get(timeout=15)
        finally:
            send.close()
    assert "Authentication failed: Invalid username or password" in caplog.text
