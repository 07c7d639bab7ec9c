"""What the streaming jobs ask of topic `events` before they start (stores.kafka.check_timestamp_type),
for the answers a cluster may give that the local stack does not (no service: the admin client is a
stand-in returning Kafka's DescribeConfigs shape)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from definitions.settings import Settings
from stores import kafka


def _admin(error_code: int, message: str | None, entries: list) -> object:
    response = SimpleNamespace(resources=[(error_code, message, 2, "events", entries)])
    return SimpleNamespace(describe_configs=lambda resources: [response], close=lambda: None)


def test_a_topic_the_job_may_not_describe_is_not_judged(monkeypatch, caplog):
    monkeypatch.setattr(kafka, "kafka_admin", lambda *a, **k: _admin(29, "Topic authorization failed.", []))
    with caplog.at_level("WARNING"):
        kafka.check_timestamp_type(Settings())
    assert "not checked" in caplog.text and "authorization" in caplog.text


@pytest.mark.parametrize(
    "answer, words",
    [
        ((0, None, [("message.timestamp.type", "CreateTime")]), "has message.timestamp.type=CreateTime"),
        ((3, "This server does not host this topic-partition.", []), "cannot be read .*does not host"),
    ],
)
def test_a_topic_stamped_by_producers_or_not_there_is_refused(monkeypatch, answer, words):
    monkeypatch.setattr(kafka, "kafka_admin", lambda *a, **k: _admin(*answer))
    with pytest.raises(RuntimeError, match=words):
        kafka.check_timestamp_type(Settings())


def test_log_append_time_passes(monkeypatch):
    monkeypatch.setattr(
        kafka, "kafka_admin", lambda *a, **k: _admin(0, None, [("message.timestamp.type", "LogAppendTime")])
    )
    kafka.check_timestamp_type(Settings())
