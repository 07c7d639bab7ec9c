"""Helpers for tests that send generated traffic through the real archiver."""

from __future__ import annotations

import io
import json
import time

from definitions.settings import Settings
from ingest.generator import GeneratorConfig, SentRecord, produce
from stores import completeness
from stores.master import read_master

VALID_KINDS = ("valid", "late", "duplicate")


def send(settings: Settings, config: GeneratorConfig) -> list[SentRecord]:
    out = io.StringIO()
    report = produce(settings, config, out)
    assert report.failed == 0
    return [SentRecord(**json.loads(line)) for line in out.getvalue().splitlines()]


def wait_archived(settings: Settings, sent: list[SentRecord], timeout_s: float = 240) -> completeness.Completeness:
    """Wait until the completeness marker covers every sent record; the marker."""
    latest_by_partition: dict[int, int] = {}
    for r in sent:
        latest_by_partition[r.partition] = max(latest_by_partition.get(r.partition, -1), r.ingest_time_ms)
    deadline = time.monotonic() + timeout_s
    marker = None
    while time.monotonic() < deadline:
        marker = completeness.latest(settings)
        if marker is not None and all(
            p in marker.partitions and marker.partitions[p].complete_before_ms > ts
            for p, ts in latest_by_partition.items()
        ):
            return marker
        time.sleep(0.5)  # a marker per archiver batch: a longer sleep only overshoots
    raise AssertionError(f"archiver did not catch up within {timeout_s}s; last marker: {marker}")


def wait_cutoff_past(settings: Settings, sent: list[SentRecord], timeout_s: float = 300) -> int:
    """Wait until completeness passes the ingest bucket of the newest record of `sent` (so a batch
    cutoff covers all of them); the highest cutoff it allows then (ms)."""
    newest = max(r.ingest_time_ms for r in sent)
    step = settings.ingest_bucket_s * 1000
    deadline = time.monotonic() + timeout_s
    while True:
        marker = wait_archived(settings, sent)
        cutoff = marker.complete_before_ms - marker.complete_before_ms % step
        if cutoff > newest:
            return cutoff
        assert time.monotonic() < deadline, (
            f"completeness did not pass the ingest bucket of {newest} within {timeout_s}s"
        )
        time.sleep(0.5)


def end_offsets(settings: Settings) -> dict[int, int]:
    """{partition: next offset} of topic `events` now: where records sent from now on will start."""
    from stores.kafka import consumer as kafka_consumer
    from stores.kafka import partition

    consumer = kafka_consumer(settings, "lambda-test-offsets")
    try:
        topic = settings.kafka.events_topic
        ends = consumer.end_offsets([partition(topic, p) for p in consumer.partitions_for_topic(topic)])
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        consumer.close()


def archived_since(settings: Settings, start: dict[int, int]) -> int:
    """How many records past the `start` offsets the newest completeness marker says are archived."""
    marker = completeness.latest(settings)
    if marker is None:
        return 0
    return sum(
        max(0, marker.partitions[p].next_offset - offset) for p, offset in start.items() if p in marker.partitions
    )


def master_rows(spark, settings: Settings, sent: list[SentRecord]) -> list:
    """Master rows at the positions of `sent` (and only those)."""
    positions = spark.createDataFrame(
        [(r.partition, r.offset) for r in sent], "kafka_partition INT, kafka_offset BIGINT"
    )
    return read_master(spark, settings).join(positions, ["kafka_partition", "kafka_offset"]).collect()


def duplicated_positions(spark, settings: Settings) -> int:
    """How many Kafka positions appear more than once anywhere in the master dataset."""
    return read_master(spark, settings).groupBy("kafka_partition", "kafka_offset").count().where("count > 1").count()


def fresh_seed() -> int:
    """A generator seed no other test run uses: event ids derive from the seed, and the platform
    de-duplicates by event id across everything ever sent, so two workloads with one seed (say
    `int(time.time())` in one test and `int(time.time()) + 1` in the test before it) would lose
    each other's events."""
    import secrets

    return secrets.randbits(63)


def mixed_workload(settings: Settings, prefix: str, count: int, pages: int) -> list[SentRecord]:
    """`count` records on `pages` URLs under `prefix`, with every kind the merge must get right:
    15 % late by 2 to 30 hours, 5 % duplicates, 3 % invalid; a fresh seed."""
    hour = 3_600
    return send(
        settings,
        GeneratorConfig(
            seed=fresh_seed(),
            count=count,
            pages=pages,
            url_prefix=prefix,
            late_fraction=0.15,
            late_min_s=2 * hour,
            late_max_s=30 * hour,
            duplicate_fraction=0.05,
            invalid_fraction=0.03,
        ),
    )
