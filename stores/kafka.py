"""Kafka as the platform uses it: producers and consumers built from settings, and what its topic
`events` holds (LogAppendTime: a record's timestamp is its ingest time): offsets at a time, spans,
what retention deleted. The topics themselves: stores/kafka_topic_config.py; Spark's reading of
`events`: stores/kafka_source.py."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from definitions.settings import Settings
from stores.clients import kafka_options

log = logging.getLogger(__name__)

TIMESTAMP_TYPE = "LogAppendTime"
# The codecs a producer may compress its record batches with ("none": uncompressed). Brokers keep a
# batch as its producer compressed it, so every reader here must decode all of them: kafka-python
# does snappy, lz4 and zstd through optional libraries, which the dependencies name.
COMPRESSION_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
# Records of a transaction its producer aborted are no events: every reader of `events` reads committed
# records only (and nothing past an open transaction until it ends), as Kafka's exactly-once producers
# expect of their consumers. Only where offsets and stamps are read without reading events does a
# reader see uncommitted ones (last_stamps, latest_ingest_ms, offsets_at: each says why).
ISOLATION_LEVEL = "read_committed"


def producer(settings: Settings, client_id: str, **options: Any):
    """A KafkaProducer to the platform's brokers; every write acknowledged by all in-sync replicas
    unless `options` says otherwise."""
    from kafka import KafkaProducer

    return KafkaProducer(client_id=client_id, **{"acks": "all", **kafka_options(settings), **options})


def consumer(settings: Settings, client_id: str, **options: Any):
    """A KafkaConsumer to the platform's brokers that commits nothing and reads committed records
    only (ISOLATION_LEVEL, as the Spark jobs do) unless `options` says otherwise."""
    from kafka import KafkaConsumer

    return KafkaConsumer(
        client_id=client_id,
        **{"enable_auto_commit": False, "isolation_level": ISOLATION_LEVEL, **kafka_options(settings), **options},
    )


def partition(topic: str, number: int):
    """A kafka-python TopicPartition."""
    from kafka import TopicPartition

    return TopicPartition(topic, number)


def offsets_at(settings: Settings, ingest_ms: int) -> dict[int, int]:
    """Per partition of `events`, the first offset whose ingest time is at or after `ingest_ms` (the
    end offset when there is none yet): every record before the time lies below it. Read
    uncommitted: a record appended after an open transaction began lies past the end a committed
    read sees (the transaction holds it back), and must be waited for too."""
    topic = settings.kafka.events_topic
    client = consumer(settings, "lambda-accuracy", isolation_level="read_uncommitted")
    try:
        parts = [partition(topic, p) for p in sorted(client.partitions_for_topic(topic) or ())]
        found = client.offsets_for_times({tp: ingest_ms for tp in parts})
        ends = client.end_offsets(parts)
        return {tp.partition: (found[tp].offset if found.get(tp) is not None else ends[tp]) for tp in parts}
    finally:
        client.close()


@dataclass(frozen=True)
class PartitionSpan:
    """What a partition of `events` holds from a time on: the offsets [start, end), and the first
    offset it still keeps (retention deletes below it) with that record's ingest time."""

    partition: int
    start: int
    end: int
    first_kept: int
    first_kept_ms: int | None  # None: the partition keeps no record


def spans_from(settings: Settings, from_ms: int) -> list[PartitionSpan]:
    """Per partition of `events`: the first offset ingested at or after `from_ms`, the end offset now,
    and the first offset kept."""
    topic = settings.kafka.events_topic
    client = consumer(settings, "lambda-replay")
    try:
        parts = [partition(topic, p) for p in sorted(client.partitions_for_topic(topic) or ())]
        ends = client.end_offsets(parts)
        begins = client.beginning_offsets(parts)
        found = client.offsets_for_times({tp: max(from_ms, 0) for tp in parts})
        first = client.offsets_for_times({tp: 0 for tp in parts})
        return [
            PartitionSpan(
                tp.partition,
                found[tp].offset if found.get(tp) is not None else ends[tp],
                ends[tp],
                begins[tp],
                first[tp].timestamp if first.get(tp) is not None else None,
            )
            for tp in parts
        ]
    finally:
        client.close()


def spans_between(settings: Settings, from_ms: int, until_ms: int) -> list[PartitionSpan] | None:
    """Per partition of `events`: the offsets of the records ingested in [from_ms, until_ms), and the
    first offset kept; None while some partition holds no record ingested at or after `until_ms` yet
    (its end is not known: ingest times never decrease within a partition, LogAppendTime)."""
    topic = settings.kafka.events_topic
    client = consumer(settings, "lambda-replay")
    try:
        parts = [partition(topic, p) for p in sorted(client.partitions_for_topic(topic) or ())]
        ends = client.offsets_for_times({tp: until_ms for tp in parts})
        if any(ends.get(tp) is None for tp in parts):
            return None
        begins = client.beginning_offsets(parts)
        found = client.offsets_for_times({tp: max(from_ms, 0) for tp in parts})
        first = client.offsets_for_times({tp: 0 for tp in parts})
        spans = []
        for tp in parts:
            end = ends[tp].offset
            start = found[tp].offset if found.get(tp) is not None else end
            spans.append(
                PartitionSpan(
                    tp.partition,
                    min(start, end),
                    end,
                    begins[tp],
                    first[tp].timestamp if first.get(tp) is not None else None,
                )
            )
        return spans
    finally:
        client.close()


def ingest_time_at(settings: Settings, number: int, offset: int) -> int:
    """The ingest time (ms) of the record at `offset` of partition `number` of `events`; ValueError
    when the partition does not keep it."""
    topic = settings.kafka.events_topic
    client = consumer(settings, "lambda-replay", consumer_timeout_ms=10_000)
    try:
        tp = partition(topic, number)
        if number not in (client.partitions_for_topic(topic) or ()):
            raise ValueError(f"topic {topic} has no partition {number}")
        client.assign([tp])
        first, end = client.beginning_offsets([tp])[tp], client.end_offsets([tp])[tp]
        if not first <= offset < end:
            raise ValueError(f"partition {number} keeps offsets {first} to {end - 1}, not {offset}")
        client.seek(tp, offset)
        for record in client:
            return int(record.timestamp)
        raise ValueError(f"partition {number}: offset {offset} could not be read")
    finally:
        client.close()


def first_offsets(settings: Settings) -> dict[int, int]:
    """Per partition of `events`, the first offset Kafka keeps (retention deletes below it)."""
    topic = settings.kafka.events_topic
    client = consumer(settings, "lambda-gaps")
    try:
        parts = [partition(topic, p) for p in sorted(client.partitions_for_topic(topic) or ())]
        return {tp.partition: offset for tp, offset in client.beginning_offsets(parts).items()}
    finally:
        client.close()


def end_offsets(settings: Settings) -> dict[int, int]:
    """Per partition of `events`, the offset after its last record now, an open or aborted
    transaction's included: every record below it was appended before this call."""
    topic = settings.kafka.events_topic
    client = consumer(settings, "lambda-replay", isolation_level="read_uncommitted")
    try:
        parts = [partition(topic, p) for p in sorted(client.partitions_for_topic(topic) or ())]
        return {tp.partition: offset for tp, offset in client.end_offsets(parts).items()}
    finally:
        client.close()


def latest_ingest_ms(settings: Settings) -> int | None:
    """The latest ingest time (the brokers' clock) of any record `events` holds now, an open or
    aborted transaction's included; None when it holds none. A record appended later has an ingest
    time at or after it (LogAppendTime)."""
    topic = settings.kafka.events_topic
    client = consumer(settings, "lambda-replay", isolation_level="read_uncommitted")
    try:
        parts = [partition(topic, p) for p in sorted(client.partitions_for_topic(topic) or ())]
        ends, begins = client.end_offsets(parts), client.beginning_offsets(parts)
    finally:
        client.close()
    kept = {tp.partition: ends[tp] for tp in parts if ends[tp] > begins[tp]}
    if not kept:
        return None
    try:
        return max(last_stamps(settings, kept, timeout_s=10.0).values(), default=None)
    except RuntimeError as exc:  # a partition keeps only markers below its end, say
        log.warning("latest ingest time: %s", exc)
        return None


def lost_since(spans: list[PartitionSpan], from_ms: int, made_again: bool = False) -> list[str]:
    """Partitions whose records from `from_ms` on Kafka may no longer hold (retention deleted records at
    or after that time), each described; empty when every record from then is kept. Ingest times never
    decrease within a partition (LogAppendTime), so a deleted record is no later than the first kept.
    `made_again`: the topic was deleted and made again, so its offsets start at 0 with every record
    before the first kept one gone all the same."""
    lost = []
    for s in spans:
        if s.first_kept == 0 and not made_again:
            continue  # nothing deleted
        if s.first_kept_ms is None or s.first_kept_ms >= from_ms:
            kept = "nothing" if s.first_kept_ms is None else f"records from ingest time {s.first_kept_ms} ms on"
            gone = "is of the topic made again" if made_again else f"deleted offsets below {s.first_kept}"
            lost.append(f"partition {s.partition} {gone} and keeps {kept}")
    return lost


def _broker_stamp(topic: str, msg) -> int:
    """A record's timestamp, which must be the broker's (LogAppendTime, type 1): the jobs check the
    topic's type when they start, and a topic changed to CreateTime while they run would let one
    producer's far-future stamp move completeness, and a batch's cutoff, past events to come."""
    if msg.timestamp_type != 1:
        raise RuntimeError(
            f"record {msg.offset} of {topic} partition {msg.partition} carries its producer's timestamp "
            f"(CreateTime), not the broker's: not an ingest time; set message.timestamp.type={TIMESTAMP_TYPE}"
        )
    return int(msg.timestamp)


def last_stamps(settings: Settings, end_offsets: dict[int, int], timeout_s: float = 30.0) -> dict[int, int]:
    """Per partition of topic `events`, the ingest timestamp (ms) of the last record below its end
    offset. The ends are read committed (stores.completeness: a batch's end offsets) or the high
    watermarks (latest_ingest_ms): below either, every record's stamp is an ingest time already given.

    That is the record at `end - 1`, unless a transactional producer's commit or abort marker holds
    that offset: no consumer is given a marker, so the last record before it is taken. Timestamps
    never decrease within a partition (LogAppendTime), so its stamp bounds what comes after as
    safely. The read is uncommitted: a record of an aborted transaction is no event (no job reads
    it, stores.kafka_source), but its stamp is an ingest time like any other."""
    ends = {p: end for p, end in end_offsets.items() if end > 0}
    if not ends:
        return {}
    topic = settings.kafka.events_topic
    parts = {p: partition(topic, p) for p in ends}
    # Earliest: a start deleted by retention meanwhile moves to the first offset kept, not to the end.
    client = consumer(
        settings,
        "lambda-completeness",
        isolation_level="read_uncommitted",
        max_poll_records=500,
        auto_offset_reset="earliest",
    )
    try:
        client.assign(list(parts.values()))
        begins = client.beginning_offsets(list(parts.values()))
        found: dict[int, tuple[int, Any]] = {}
        deadline = time.monotonic() + timeout_s
        lookback = 1
        pending = set(ends)
        while pending:
            starts = {p: max(begins[parts[p]], ends[p] - lookback) for p in pending}
            for p in pending:
                client.seek(parts[p], starts[p])
            client.resume(*[parts[p] for p in pending])
            reading = set(pending)
            while reading:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"could not read partitions {sorted(reading)} of {topic} up to {[ends[p] for p in sorted(reading)]}"
                    )
                for tp, messages in client.poll(timeout_ms=1000).items():
                    for msg in messages:
                        if msg.offset < ends[tp.partition] and msg.offset >= found.get(tp.partition, (-1, 0))[0]:
                            found[tp.partition] = (msg.offset, msg)
                for p in list(reading):
                    if (p in found and found[p][0] == ends[p] - 1) or client.position(
                        parts[p], timeout_ms=5_000
                    ) >= ends[p]:
                        client.pause(parts[p])
                        reading.discard(p)
            exhausted = {p for p in pending if p not in found and starts[p] <= begins[parts[p]]}
            if exhausted:
                raise RuntimeError(f"partitions {sorted(exhausted)} of {topic} keep no record below their end offsets")
            pending = {p for p in pending if p not in found}
            lookback *= 32
        # The record taken, only: an older one read on the way may predate the topic's LogAppendTime.
        return {p: _broker_stamp(topic, msg) for p, (_, msg) in found.items()}
    finally:
        client.close()
