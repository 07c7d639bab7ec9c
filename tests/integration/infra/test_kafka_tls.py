"""TLS settings reach real Kafka clients: the local broker's SSL listener, which requires a client
certificate from the local stack's CA (infra.local_tls), accepts kafka-python and Spark's Kafka
source configured only through the `kafka.*` settings, and refuses a client without a certificate,
with a certificate from another CA, or that does not trust the broker's CA."""

from __future__ import annotations

import json
import ssl

import pytest
from kafka.errors import KafkaError

from definitions.store_connections import KafkaSettings
from infra.local_tls import local_tls, make_tls
from stores.clients import kafka_spark_options
from stores.kafka import producer
from tests.support.kafka_topics import round_trip, scratch_topic


def over_tls(settings, cafile, certfile=None, keyfile=None):
    k = settings.kafka
    if not k.ssl_listener_port:
        pytest.skip("kafka.ssl_listener_port is 0: the local broker has no SSL listener")
    kafka = KafkaSettings(
        **{
            **k.model_dump(),
            "bootstrap_servers": [f"{k.host}:{k.ssl_listener_port}"],
            "security_protocol": "SSL",
            "ssl_cafile": str(cafile),
            "ssl_certfile": str(certfile or ""),
            "ssl_keyfile": str(keyfile or ""),
        }
    )
    return settings.model_copy(update={"kafka": kafka})


def refused(settings, topic: str, client_id: str) -> None:
    """kafka-python gives up with a Kafka error, or lets the TLS alert through (ssl.SSLError)."""
    with pytest.raises((KafkaError, ssl.SSLError)):
        send = producer(settings, client_id, max_block_ms=8_000)
        try:
            send.send(topic, value=b"x", partition=0).get(timeout=10)
        finally:
            send.close()


def test_kafka_python_and_spark_read_and_write_over_mutual_tls(settings, stack, spark, unique):
    tls = local_tls(settings)
    chosen = over_tls(settings, tls.ca, tls.client_cert, tls.client_key)
    with scratch_topic(settings, f"test-tls-{unique}") as topic:
        payload = f"tls-{unique}".encode()
        offset = round_trip(chosen, topic, payload, f"test-tls-{unique}")
        # Spark's own Kafka client (Java), with the certificates and key the settings name.
        frame = (
            spark.read.format("kafka")
            .options(**kafka_spark_options(chosen))
            .option("assign", json.dumps({topic: [0]}))
            .option("startingOffsets", json.dumps({topic: {"0": offset}}))
            .option("endingOffsets", json.dumps({topic: {"0": offset + 1}}))
            .load()
            .select("value")
        )
        assert [bytes(r.value) for r in frame.collect()] == [payload]
        plan = frame._jdf.queryExecution().toString()
        assert "PRIVATE KEY" not in plan, "the key never shows in a query plan"


def test_a_client_without_a_trusted_certificate_is_refused(settings, stack, unique, tmp_path):
    tls = local_tls(settings)
    stranger = make_tls(tmp_path / "other", ["127.0.0.1"], name="another")
    with scratch_topic(settings, f"test-tls-bad-{unique}") as topic:
        refused(over_tls(settings, tls.ca), topic, f"test-tls-nocert-{unique}")
        refused(
            over_tls(settings, tls.ca, stranger.client_cert, stranger.client_key), topic, f"test-tls-other-{unique}"
        )
        # ... and a client that does not trust the broker's CA does not talk to it either.
        refused(over_tls(settings, stranger.ca, tls.client_cert, tls.client_key), topic, f"test-tls-ca-{unique}")
