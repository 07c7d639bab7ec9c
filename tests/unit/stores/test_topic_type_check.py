"""What the streaming jobs ask of topic `events` before they start (stores.kafka_topic_config.check_timestamp_type),
for the answers a cluster may give that the local stack does not (no service: the admin client is a
stand-in returning Kafka's DescribeConfigs shape)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from definitions.settings import Settings
from stores import kafka_topic_config


def _admin(error_code: int, message: str | None, entries: list) -> object:
    response = SimpleNamespace(resources=[(error_code, message, 2, "events", entries)])
    return SimpleNamespace(describe_configs=lambda resources: [response], close=lambda: None)


def test_a_topic_the_job_may_not_describe_is_not_judged(monkeypatch, caplog):
    monkeypatch.setattr(
        kafka_topic_config, "kafka_admin", lambda *a, **k: _admin(29, "Topic authorization failed.", [])
    )
    with caplog.at_level("WARNING"):
        kafka_topic_config.check_timestamp_type(Settings())
    assert "not checked" in caplog.text and "authorization" in caplog.text


@pytest.mark.parametrize(
    "answer, words",
    [
        ((0, None, [("message.timestamp.type", "CreateTime")]), "has message.timestamp.type=CreateTime"),
        ((3, "This server does not host this topic-partition.", []), "cannot be read .*does not host"),
    ],
)
def test_a_topic_stamped_by_producers_or_not_there_is_refused(monkeypatch, answer, words):
    monkeypatch.setattr(kafka_topic_config, "kafka_admin", lambda *a, **k: _admin(*answer))
    with pytest.raises(RuntimeError, match=words):
        kafka_topic_config.check_timestamp_type(Settings())


def test_log_append_time_passes(monkeypatch):
    monkeypatch.setattr(
        kafka_topic_config,
        "kafka_admin",
        lambda *a, **k: _admin(0, None, [("message.timestamp.type", "LogAppendTime")]),
    )
    kafka_topic_config.check_timestamp_type(Settings())


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_a_compacted_topic_is_refused(monkeypatch, policy):
    """Compaction deletes every record but the last of each key, whether a job read it or not: the
    ticks share one key, a user's events may too."""
    entries = [("message.timestamp.type", "LogAppendTime"), ("cleanup.policy", policy)]
    monkeypatch.setattr(kafka_topic_config, "kafka_admin", lambda *a, **k: _admin(0, None, entries))
    with pytest.raises(RuntimeError, match=f"cleanup.policy={policy}: compaction deletes"):
        kafka_topic_config.check_timestamp_type(Settings())


def test_the_platforms_topics_are_made_and_kept_deleting_by_retention_only():
    for name, configs in kafka_topic_config.topic_configs(Settings()).items():
        assert configs["cleanup.policy"] == "delete", name


def test_completeness_refuses_a_stamp_its_producer_chose():
    """A topic changed to CreateTime while the jobs run (they check its type when they start): a
    record's stamp is no ingest time, and one far in the future moved completeness past events to come."""
    broker = SimpleNamespace(offset=7, partition=2, timestamp=1_700_000_000_000, timestamp_type=1)
    from stores.kafka import _broker_stamp

    assert _broker_stamp("events", broker) == 1_700_000_000_000
    producer = SimpleNamespace(offset=8, partition=2, timestamp=4_102_444_800_000, timestamp_type=0)
    with pytest.raises(RuntimeError, match="record 8 of events partition 2 carries its producer's timestamp"):
        _broker_stamp("events", producer)


@pytest.mark.parametrize("stored", ["producer", "zstd"])
def test_a_topic_keeping_batches_as_producers_compressed_them_is_refused_unless_the_settings_say_so(
    monkeypatch, caplog, stored
):
    """Kept compressed, a 30 KB batch can declare a record of 1 GiB, which the jobs' Kafka client
    allocates whole: OutOfMemoryError at every restart. The jobs only warned, and ran."""
    entries = [("message.timestamp.type", "LogAppendTime"), ("compression.type", stored)]
    monkeypatch.setattr(kafka_topic_config, "kafka_admin", lambda *a, **k: _admin(0, None, entries))
    with pytest.raises(RuntimeError, match=f"compression.type={stored}.*compression.type=uncompressed"):
        kafka_topic_config.check_timestamp_type(Settings())
    chosen = Settings(kafka={"stored_compression": stored})  # the operator's choice, named
    with caplog.at_level("WARNING"):
        kafka_topic_config.check_timestamp_type(chosen)
    assert "OutOfMemoryError" in caplog.text
    entries[1] = ("compression.type", "uncompressed")
    caplog.clear()
    with caplog.at_level("WARNING"):
        kafka_topic_config.check_timestamp_type(Settings())
    assert caplog.text == ""
