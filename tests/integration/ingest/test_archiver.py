"""The archiver on the real stack: exactly the valid records in the master dataset, the invalid
ones in the dead-letter topic, exactly once across a kill -9, and an honest completeness marker."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from datetime import UTC

from kafka import KafkaConsumer, TopicPartition

from definitions.events import parse_time
from infra.stack import Stack
from ingest.generator import INVALID_KINDS, GeneratorConfig
from stores import completeness
from stores.master import read_master
from tests.support.events import (
    VALID_KINDS,
    archived_since,
    duplicated_positions,
    end_offsets,
    fresh_seed,
    master_rows,
    send,
    wait_archived,
)
from tests.support.polling import wait_for

EXPECTED_REASON = {
    "malformed_json": "malformed JSON",
    "missing_field": "missing field",
    "mistyped_field": "mistyped field",
    "absurd_timestamp": "absurd event_time",
    "oversized": "oversized",
    "bad_event_type": "bad value: event_type",
    "unknown_field": "unknown field",
    "not_an_object": "not a JSON object",
}


def dlq_records(settings, positions: set[tuple[int, int]], timeout_s: float = 60) -> dict[tuple[int, int], list[dict]]:
    """Dead letters whose source position is in `positions`, read from the start of `events.dlq`."""
    topic = settings.kafka.dlq_topic
    consumer = KafkaConsumer(
        bootstrap_servers=settings.kafka.bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=5_000,
        value_deserializer=json.loads,
    )
    parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
    consumer.assign(parts)
    consumer.seek_to_beginning()
    found: dict[tuple[int, int], list[dict]] = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for msg in consumer:
            key = (msg.value["source_partition"], msg.value["source_offset"])
            if key in positions and msg.value["source_topic"] == settings.kafka.events_topic:
                found.setdefault(key, []).append(msg.value)
        if set(found) >= positions:
            break
    consumer.close()
    return found


def send_raw(settings, values: list[bytes | None]) -> list[tuple[int, int]]:
    """Records no generator would make (a tombstone, binary garbage); their positions."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap, acks="all")
    futures = [producer.send(settings.kafka.events_topic, key=b"u-raw", value=v) for v in values]
    producer.flush()
    positions = [(f.get(30).partition, f.get(30).offset) for f in futures]
    producer.close()
    return positions


def test_master_holds_exactly_the_valid_records_and_dlq_the_invalid(settings, stack, spark):
    config = GeneratorConfig(
        seed=fresh_seed(),
        count=3_000,
        late_fraction=0.1,
        late_min_s=3_600,
        late_max_s=3 * 86_400,
        duplicate_fraction=0.05,
        invalid_fraction=0.08,
    )
    tombstone, garbage = send_raw(settings, [None, b"\xff\xfe\x00\x9c binary"])
    sent = send(settings, config)
    assert {r.kind for r in sent} >= set(INVALID_KINDS) | set(VALID_KINDS)
    wait_archived(settings, sent)

    valid = {(r.partition, r.offset): r for r in sent if r.kind in VALID_KINDS}
    rows = master_rows(spark, settings, sent)
    got = {(row.kafka_partition, row.kafka_offset): row for row in rows}
    assert len(rows) == len(got), "a Kafka record was archived twice"
    assert set(got) == set(valid), "the master dataset holds exactly the valid records sent"
    # Duplicates are archived as received: the same event_id at several positions.
    dup_ids = {r.event_id for r in sent if r.kind == "duplicate"}
    assert dup_ids and all(sum(1 for row in rows if row.event_id == i) >= 2 for i in list(dup_ids)[:20])
    for pos, record in valid.items():
        row, doc = got[pos], json.loads(record.value)
        assert (row.event_id, row.url, row.user_id, row.event_type) == (
            doc["event_id"],
            doc["url"],
            doc["user_id"],
            doc["event_type"],
        )
        assert row.event_time == parse_time(doc["event_time"]).replace(tzinfo=None)
        assert int(row.ingest_time.replace(tzinfo=UTC).timestamp() * 1000) == record.ingest_time_ms
        assert row.ingest_date == row.ingest_time.date() and row.ingest_hour == row.ingest_time.hour

    invalid = {(r.partition, r.offset): r for r in sent if r.kind in INVALID_KINDS}
    letters = dlq_records(settings, set(invalid) | {tombstone, garbage})
    assert letters[tombstone][0]["reason"] == "empty record: no value"
    assert letters[garbage][0]["reason"].startswith("malformed JSON")
    assert set(letters) - {tombstone, garbage} == set(invalid), "every invalid record is dead-lettered"
    for pos, record in invalid.items():
        letter = letters[pos][0]
        assert letter["reason"].startswith(EXPECTED_REASON[record.kind]), (record.kind, letter["reason"])
        assert letter["source_topic"] == settings.kafka.events_topic


def test_kill_9_mid_stream_loses_nothing_and_writes_nothing_twice(settings, stack, spark):
    supervisor = stack.supervisor
    # A minute of traffic, so that the kill lands while it flows even when micro-batches are slow.
    config = GeneratorConfig(seed=fresh_seed(), count=12_000, rate=200, duplicate_fraction=0.02, invalid_fraction=0.02)
    result: dict = {}
    producer = threading.Thread(target=lambda: result.setdefault("sent", send(settings, config)))
    start = end_offsets(settings)
    producer.start()
    # Mid-stream: the archiver has committed records of this run (well beyond the tick records,
    # one per partition every few seconds) while the producer is still sending.
    wait_for(
        lambda: archived_since(settings, start) >= 200, "the archiver to commit records of this run", timeout_s=120
    )
    assert producer.is_alive(), "the kill comes mid-stream: the producer is still sending"
    archiver = supervisor.process("archiver")
    assert archiver is not None
    os.killpg(archiver.pid, signal.SIGKILL)
    archiver.wait(30)
    producer.join(120)
    # The supervisor restarts the job (or `up` does, if it has not yet); `up` waits until it is healthy.
    Stack(settings).up()
    again = stack.supervisor.process("archiver")
    assert again is not None and again.pid != archiver.pid, "a new archiver process runs"

    sent = result["sent"]
    wait_archived(settings, sent)
    valid = {(r.partition, r.offset) for r in sent if r.kind in VALID_KINDS}
    rows = master_rows(spark, settings, sent)
    assert sorted((r.kafka_partition, r.kafka_offset) for r in rows) == sorted(valid)
    assert duplicated_positions(spark, settings) == 0


def test_completeness_never_claims_unarchived_records(settings, stack, spark):
    config = GeneratorConfig(seed=fresh_seed(), count=4_000, rate=400, late_fraction=0.2)
    result: dict = {}
    from pyspark.sql import functions as F

    since = F.timestamp_millis(F.lit(int(time.time() * 1000) - 60_000))  # this run's records, not a whole big dataset
    producer = threading.Thread(target=lambda: result.setdefault("sent", send(settings, config)))
    producer.start()
    observations = []
    deadline = time.monotonic() + 300

    def covers_run(marker) -> bool:
        sent = result.get("sent")
        return sent is not None and all(
            r.partition in marker.partitions and marker.partitions[r.partition].complete_before_ms > r.ingest_time_ms
            for r in sent
        )

    while time.monotonic() < deadline:
        marker = completeness.latest(settings)
        if marker is not None:
            # Read the master dataset after the marker: it must already hold what the marker claims.
            master = read_master(spark, settings).where(F.col("ingest_time") >= since)
            snapshot = master.select("kafka_partition", "kafka_offset").collect()
            observations.append((marker, {(r.kafka_partition, r.kafka_offset) for r in snapshot}))
            if not producer.is_alive() and covers_run(marker):
                break
        time.sleep(2)
    producer.join()
    sent = result["sent"]
    checked = 0
    for marker, archived in observations:
        for r in sent:
            progress = marker.partitions.get(r.partition)
            if progress is not None and r.ingest_time_ms < progress.complete_before_ms and r.kind in VALID_KINDS:
                assert (r.partition, r.offset) in archived, (
                    f"marker {marker.batch_id} claims {r} but it is not archived"
                )
                checked += 1
    assert covers_run(observations[-1][0]), "the archiver caught up with the run"
    assert len(observations) >= 3 and checked > 0
