"""The options every Spark read of topic `events` (archiver, speed layer, replay) starts with."""

from __future__ import annotations

from definitions.settings import Settings
from stores.kafka import ISOLATION_LEVEL
from stores.kafka_source import kafka_source_options


def test_reads_see_committed_records_only():
    assert kafka_source_options(Settings())["kafka.isolation.level"] == ISOLATION_LEVEL == "read_committed"


def test_a_task_at_the_end_of_the_log_does_not_wait_out_kafkas_fetch_wait():
    """A task's offset range often ends after a commit marker, where the consumer's last fetch waits
    fetch.max.wait.ms for data that is not coming; Kafka's default (500 ms) cost every micro-batch
    about half a second per wave of tasks (measured: the Kafka stage of an idle batch 1.09 s → 0.09 s)."""
    settings = Settings()
    wait_ms = int(kafka_source_options(settings)["kafka.fetch.max.wait.ms"])
    assert 0 < wait_ms <= settings.speed.trigger_s * 1000 / 20
