"""The jobs' per-record path in Spark (local session, no service): every hostile record of the corpus
gets a verdict in the same query as valid ones, nothing fails the query, and a dead letter of any
record fits in one Kafka record."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

from definitions.events import TICK_KEY
from ingest.archiver import DEAD_LETTER_JSON, dead_letter_raw
from stores.kafka_source import LOG_APPEND_TIME, PRODUCER_STAMP_REASON, TICK_REASON, validated_events
from tests.support.hostile import BASE, CONFIRMED, corpus

KAFKA_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, timestampType INT"
)
INGESTED = datetime(2026, 11, 17, 9, 0, tzinfo=UTC)


def kafka_frame(spark, values: list[tuple[bytes | None, bytes | None]], stamp_type: int = LOG_APPEND_TIME):
    rows = [(key, value, "events", 0, offset, INGESTED, stamp_type) for offset, (key, value) in enumerate(values)]
    return spark.createDataFrame(rows, KAFKA_DDL)


def test_hostile_records_get_reasons_beside_valid_ones(spark, settings):
    hostile = [(key, value) for _, key, value in corpus(seed=11, count=2_000)]
    valid = [(b"u-1", json.dumps(dict(BASE, event_id=f"ok-{i}", url=f"/ok/{i}")).encode()) for i in range(50)]
    tick = [(TICK_KEY, b"")]
    frame = validated_events(kafka_frame(spark, hostile + valid + tick), settings.events)
    rows = frame.select("kafka_offset", "reason", "url").collect()

    by_offset = {row.kafka_offset: row for row in rows}
    assert len(rows) == len(hostile) + len(valid), "every record but the tick gets exactly one verdict"
    assert len(hostile) + len(valid) not in by_offset, "the tick record is dropped"
    assert all(by_offset[i].reason for i in range(len(hostile))), "every hostile record has a reason"
    assert [by_offset[len(hostile) + i].reason for i in range(len(valid))] == [None] * len(valid)
    assert by_offset[len(hostile)].url == "/ok/0"


def test_a_dead_letter_fits_in_one_kafka_record(spark, settings):
    from pyspark.sql import functions as F

    raw = CONFIRMED["event_900_kb"]
    keep = settings.events.max_dlq_raw_bytes
    frame = spark.createDataFrame([(raw,), (b"small",), (None,)], "raw BINARY")
    envelopes = [
        json.loads(row.value)
        for row in frame.select(
            F.to_json(F.struct(*dead_letter_raw(F.col("raw"), keep)), DEAD_LETTER_JSON).alias("value")
        ).collect()
    ]

    big, small, empty = envelopes
    assert big["raw_bytes"] == len(raw) and big["raw_truncated"] is True
    assert big["raw_sha256"] == hashlib.sha256(raw).hexdigest()
    assert len(json.dumps(big)) < 2 * keep, "the envelope of a 900 KB record is a few KB"
    assert small == {
        "raw_base64": "c21hbGw=",
        "raw_bytes": 5,
        "raw_truncated": False,
        "raw_sha256": hashlib.sha256(b"small").hexdigest(),
    }
    # A record without a value (a tombstone): every key of the envelope all the same, as documented.
    assert empty == {"raw_base64": None, "raw_bytes": None, "raw_truncated": False, "raw_sha256": None}


def test_a_dead_letter_keeps_the_records_key_beside_its_value(spark, settings):
    """The envelope kept the value but not the key (the user_id Kafka partitions by): once retention
    deleted the original, a mended record could not be sent again as it came."""
    from ingest.archiver import DLQ_KEY_BYTES, dead_letters

    long_key = b"k" * (DLQ_KEY_BYTES + 10)
    values = [(b"u-829", b"{not json"), (None, b"[]"), (long_key, b"{}")]
    refused = validated_events(kafka_frame(spark, values), settings.events, keep_key=True)
    letters = [
        (json.loads(row.key), json.loads(row.value))
        for row in dead_letters(refused.where("reason IS NOT NULL"), settings).orderBy("key").collect()
    ]
    assert [position["offset"] for position, _ in letters] == [0, 1, 2]
    first, keyless, long = (letter for _, letter in letters)
    assert first["reason"] and first["raw_base64"] == "e25vdCBqc29u"
    assert first["key_base64"] == "dS04Mjk=" and first["key_bytes"] == 5 and first["key_truncated"] is False
    assert first["key_sha256"] == hashlib.sha256(b"u-829").hexdigest()
    assert keyless["key_base64"] is None and keyless["key_bytes"] is None and keyless["key_truncated"] is False
    assert long["key_bytes"] == len(long_key) and long["key_truncated"] is True
    assert long["key_sha256"] == hashlib.sha256(long_key).hexdigest()
    assert "raw_key" not in validated_events(kafka_frame(spark, values), settings.events).columns, (
        "the speed layer's rows stay as they were"
    )


def test_a_record_its_producer_stamped_is_refused_and_a_tombstone_under_the_tick_key_too(spark, settings):
    """The Spark jobs took any record's Kafka timestamp as its ingest time: a record stored with its
    producer's stamp (CreateTime, before the topic was LogAppendTime) moved the speed layer's
    watermark to year 9999. A null value under the tick key vanished, neither dead-lettered nor
    counted."""
    valid = json.dumps(dict(BASE, event_id="stamped")).encode()
    stamped = validated_events(kafka_frame(spark, [(b"u-1", valid)], stamp_type=0), settings.events)
    [row] = stamped.select("reason", "event_id").collect()
    assert row.reason == PRODUCER_STAMP_REASON and "CreateTime" in row.reason
    frame = validated_events(kafka_frame(spark, [(TICK_KEY, None), (TICK_KEY, b"")]), settings.events)
    [tombstone] = frame.select("kafka_offset", "reason").collect()
    assert tombstone.kafka_offset == 0 and tombstone.reason, "the tombstone gets a reason; the tick is dropped"


def test_the_speed_layer_keeps_the_ticks_the_broker_stamped_and_names_them(spark, settings):
    """The speed layer keeps ticks until its watermark has seen them: each with TICK_REASON (never
    valid), and only a tick the broker stamped (a producer's stamp would move the watermark wherever
    it chose). Without keep_ticks, no tick is kept."""
    valid = json.dumps(dict(BASE, event_id="kept")).encode()
    records = [(TICK_KEY, b""), (b"u-1", valid), (TICK_KEY, None)]
    kept = validated_events(kafka_frame(spark, records), settings.events, keep_ticks=True)
    rows = {row.kafka_offset: row.reason for row in kept.select("kafka_offset", "reason").collect()}
    assert rows[0] == TICK_REASON and rows[1] is None and rows[2] not in (None, TICK_REASON), rows
    stamped = validated_events(kafka_frame(spark, records, stamp_type=0), settings.events, keep_ticks=True)
    assert sorted(row.kafka_offset for row in stamped.collect()) == [1, 2]
    assert sorted(
        row.kafka_offset for row in validated_events(kafka_frame(spark, records), settings.events).collect()
    ) == [1, 2]
