"""Records from a transactional producer (Kafka's exactly-once producers: Kafka Streams, Flink, …) on
the real stack: a committed transaction's events are archived and counted exactly, an aborted
transaction's records are no events (neither archived, nor dead-lettered, nor counted), and the
completeness marker passes a partition whose last offset is a commit or abort marker."""

from __future__ import annotations

import json
import uuid

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaError

from definitions.settings import Settings
from infra.store_services import transaction_max_timeout_ms
from ingest.generator import INVALID_KINDS, ClickstreamGenerator, GeneratorConfig, SentRecord
from stores import completeness
from stores.kafka import consumer
from tests.integration.ingest.test_archiver import dlq_records
from tests.support.events import VALID_KINDS, fresh_seed, master_rows, wait_archived
from tests.support.polling import wait_for
from tests.support.realtime import realtime, wait_until_exact


def transactional_producer(settings: Settings, timeout_ms: int = 60_000) -> KafkaProducer:
    producer = KafkaProducer(
        bootstrap_servers=settings.kafka.bootstrap,
        transactional_id=f"test-{uuid.uuid4().hex}",
        acks="all",
        transaction_timeout_ms=timeout_ms,
    )
    producer.init_transactions()
    return producer


def test_a_transaction_is_open_at_most_half_the_speed_layers_window(settings):
    """A producer keeping transactions open held its partitions back by up to Kafka's default 15
    minutes, and the speed layer dropped what they released as late: the broker refuses a longer
    transaction than half `speed.dedupe_window_s` (what one held back is then still counted)."""
    limit = transaction_max_timeout_ms(settings)
    assert limit <= max(10_000, settings.speed.dedupe_window_s * 500)
    with pytest.raises(KafkaError, match="InvalidTransactionTimeout"):
        transactional_producer(settings, timeout_ms=limit + 1_000)
    transactional_producer(settings, timeout_ms=limit).close()


def send_transaction(producer: KafkaProducer, topic: str, config: GeneratorConfig, commit: bool) -> list[SentRecord]:
    """One transaction of the generator's records, committed or aborted; what was sent, where."""
    producer.begin_transaction()
    records = list(ClickstreamGenerator(config).records())
    futures = [producer.send(topic, key=r.key, value=r.value) for r in records]
    producer.flush()
    sent = []
    for record, future in zip(records, futures, strict=True):
        meta = future.get(30)
        sent.append(
            SentRecord(record.kind, record.event_id, meta.partition, meta.offset, meta.timestamp, record.value.decode())
        )
    if commit:
        producer.commit_transaction()
    else:
        producer.abort_transaction()
    return sent


def end_offsets(settings: Settings, topic: str) -> dict[int, int]:
    client = consumer(settings, "test-transactions")
    try:
        from kafka import TopicPartition

        parts = [TopicPartition(topic, p) for p in sorted(client.partitions_for_topic(topic) or ())]
        return {tp.partition: end for tp, end in client.end_offsets(parts).items()}
    finally:
        client.close()


def test_the_stamp_of_a_partition_ending_in_a_transaction_marker(settings):
    """The last offset of each partition is a commit (then an abort) marker no consumer is given:
    completeness takes the last record before it."""
    topic = f"test-txn-stamps-{uuid.uuid4().hex[:8]}"
    from kafka.admin import NewTopic

    from stores.clients import kafka_admin

    admin = kafka_admin(settings)
    admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})])
    admin.close()
    local = Settings(kafka={**settings.kafka.model_dump(), "events_topic": topic})
    producer = None
    try:
        producer = transactional_producer(settings)
        for commit in (True, False):
            sent = send_transaction(producer, topic, GeneratorConfig(seed=fresh_seed(), count=40), commit)
            last = {}
            for r in sent:
                if r.offset > last.get(r.partition, (-1, 0))[0]:
                    last[r.partition] = (r.offset, r.ingest_time_ms)
            assert set(last) == {0, 1}
            # The marker follows the transaction's last record in each partition (the brokers write
            # it just after the transaction ends).
            marked = {p: offset + 2 for p, (offset, _) in last.items()}
            ends = wait_for(
                lambda marked=marked: (e := end_offsets(settings, topic)) == marked and e,
                "the transaction's markers",
                30,
                0.2,
            )
            progress = completeness.progress_from_end_offsets(local, ends)
            assert {p: (pp.next_offset, pp.complete_before_ms) for p, pp in progress.items()} == {
                p: (ends[p], stamp) for p, (_, stamp) in last.items()
            }, "commit" if commit else "abort"
    finally:
        if producer is not None:
            producer.close()
        admin = kafka_admin(settings)
        admin.delete_topics([topic])
        admin.close()


def test_aborted_transactions_are_no_events_and_committed_ones_count_exactly(settings, stack, spark):
    prefix = f"/txn-{uuid.uuid4().hex[:8]}"
    topic = settings.kafka.events_topic
    producer = transactional_producer(settings)
    sent = {}
    try:
        for name, commit in (("committed", True), ("aborted", False), ("committed-after", True)):
            config = GeneratorConfig(
                seed=fresh_seed(),
                count=300,
                pages=8,
                url_prefix=f"{prefix}-{name}",
                duplicate_fraction=0.05,
                invalid_fraction=0.05,
            )
            sent[name] = send_transaction(producer, topic, config, commit)
    finally:
        producer.close()
    committed = sent["committed"] + sent["committed-after"]
    aborted = sent["aborted"]

    wait_archived(settings, committed, timeout_s=180)
    rows = master_rows(spark, settings, committed + aborted)
    archived = {(row.kafka_partition, row.kafka_offset) for row in rows}
    assert archived == {(r.partition, r.offset) for r in committed if r.kind in VALID_KINDS}, (
        f"{len(archived & {(r.partition, r.offset) for r in aborted})} aborted records archived"
    )

    wait_until_exact(settings, committed, timeout_s=180)
    aborted_urls = {json.loads(r.value)["url"] for r in aborted if r.kind in VALID_KINDS}
    counted = {cell: values for cell, values in realtime(settings, aborted_urls).items() if values}
    assert not counted, f"aborted events counted by the speed layer: {counted}"

    invalid = {(r.partition, r.offset) for r in committed if r.kind in INVALID_KINDS}
    aborted_invalid = {(r.partition, r.offset) for r in aborted if r.kind in INVALID_KINDS}
    assert invalid and aborted_invalid
    letters = dlq_records(settings, invalid | aborted_invalid, timeout_s=30)
    assert set(letters) == invalid, f"{len(set(letters) & aborted_invalid)} aborted records dead-lettered"


def test_the_platforms_consumers_stop_at_an_open_transaction(settings):
    """The end offsets the replay and the accuracy report plan with (stores.kafka.consumer) stop
    where an open transaction begins, as the Spark jobs' reads do: nothing past it is read yet."""
    producer = transactional_producer(settings)
    try:
        producer.begin_transaction()
        meta = producer.send(settings.kafka.events_topic, key=b"u-open", value=b'{"open": true}').get(30)
        held = end_offsets(settings, settings.kafka.events_topic)[meta.partition]
        producer.abort_transaction()
    finally:
        producer.close()
    assert held == meta.offset
    wait_for(
        lambda: end_offsets(settings, settings.kafka.events_topic)[meta.partition] > meta.offset,
        "the end of the partition past the aborted transaction",
        30,
        0.2,
    )


def test_the_accuracy_reports_wait_reaches_past_an_open_transaction(settings):
    """offsets_at (the report's wait for the speed layer: every record ingested before the window's
    end) gives the offset past a record appended after an open transaction began, not the end the
    open transaction holds back: the report waits for the speed layer to read it, or says it did not."""
    from kafka.admin import NewTopic

    from stores.clients import kafka_admin
    from stores.kafka import offsets_at

    topic = f"test-txn-offsets-{uuid.uuid4().hex[:8]}"
    admin = kafka_admin(settings)
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})])
    admin.close()
    local = Settings(kafka={**settings.kafka.model_dump(), "events_topic": topic})
    producer = plain = None
    try:
        producer = transactional_producer(settings)
        producer.begin_transaction()
        opened = producer.send(topic, partition=0, key=b"u-open", value=b'{"open": true}').get(30)
        plain = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap, acks="all")
        after = plain.send(topic, partition=0, key=b"u-after", value=b'{"after": true}').get(30)
        assert after.offset > opened.offset
        needed = offsets_at(local, after.timestamp + 1)
        producer.abort_transaction()
        assert needed == {0: after.offset + 1}, f"the record at {after.offset} lies below the offset waited for"
        first_at = after.offset if after.timestamp > opened.timestamp else opened.offset  # appended in one ms
        assert offsets_at(local, after.timestamp) == {0: first_at}
    finally:
        for client in (producer, plain):
            if client is not None:
                client.close()
        admin = kafka_admin(settings)
        admin.delete_topics([topic])
        admin.close()
