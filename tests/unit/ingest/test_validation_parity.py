"""The JVM validator the Spark jobs run (definitions/jvm/ValidateEvent.java) gives every record the
same verdict, the same reason and the same typed fields as the contract's own validator
(definitions.events.verdict), over a large seeded corpus of valid, invalid and hostile records."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from definitions.events import FIELD_NAMES, verdict
from definitions.layer_settings import EventLimits
from stores.kafka_source import LOG_APPEND_TIME, validated_events
from tests.support.parity_corpus import records

KAFKA_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, timestampType INT"
)
RECORDS = 40_000


def jvm_verdicts(spark, limits: EventLimits, corpus: list[tuple[bytes | None, int]]) -> dict[int, tuple]:
    rows = [
        (b"k", value, "events", 0, offset, datetime.fromtimestamp(ms / 1000, UTC), LOG_APPEND_TIME)
        for offset, (value, ms) in enumerate(corpus)
    ]
    frame = validated_events(spark.createDataFrame(rows, KAFKA_DDL), limits)
    columns = ["kafka_offset", "reason", *FIELD_NAMES]
    return {
        row.kafka_offset: (
            row.reason,
            *[
                None if row[n] is None else (int(row[n].timestamp() * 1000) if n == "event_time" else row[n])
                for n in FIELD_NAMES
            ],
        )
        for row in frame.select(*columns).collect()
    }


def python_verdict(value: bytes | None, ingest_ms: int, limits) -> tuple:
    event, reason = verdict(value, ingest_ms, limits)
    if event is None:
        return (reason, *[None] * len(FIELD_NAMES))
    return (None, *[event[n] for n in FIELD_NAMES])


def disagreements(spark, limits, corpus) -> tuple[list, dict]:
    jvm = jvm_verdicts(spark, limits, corpus)
    expected = {i: python_verdict(value, ms, limits) for i, (value, ms) in enumerate(corpus)}
    differ = [
        (corpus[i][0][:200] if corpus[i][0] else None, expected[i], jvm.get(i))
        for i in expected
        if jvm.get(i) != expected[i]
    ]
    return differ, expected


def test_the_jvm_validator_agrees_with_the_contract_on_every_record(spark, settings):
    corpus = list(records(seed=2026, count=RECORDS))
    differ, expected = disagreements(spark, settings.events, corpus)
    assert not differ, f"{len(differ)} of {len(corpus)} records differ; first ones: {differ[:5]}"
    valid = sum(1 for v in expected.values() if v[0] is None)
    reasons = {v[0].split(":")[0] for v in expected.values() if v[0] is not None}
    assert valid > RECORDS // 10, "the corpus holds valid events in many shapes"
    assert len(reasons) >= 12, f"the corpus reaches most rules: {sorted(reasons)}"


@pytest.mark.parametrize(
    "limits",
    [
        EventLimits(
            max_record_bytes=256,
            max_nesting_depth=1,
            max_url_chars=16,
            max_referrer_chars=16,
            max_user_id_chars=8,
            max_event_id_chars=8,
            min_event_time_s=0,
            max_future_s=0,
        ),
        # Every field at its own maximum: settings refuse these together (a view key could not fit the
        # stores: EventLimits._keys_fit_the_stores), the validators must still agree on them.
        EventLimits.model_construct(
            max_record_bytes=1_000_000,
            max_nesting_depth=64,
            max_url_chars=1_000_000,
            max_referrer_chars=1_000_000,
            max_user_id_chars=1_000_000,
            max_event_id_chars=1_000_000,
            min_event_time_s=253_402_300_799,
            max_future_s=7 * 86_400,
        ),
    ],
    ids=["lowest", "highest"],
)
def test_the_validators_agree_at_the_limits_extremes(spark, limits):
    differ, _ = disagreements(spark, limits, list(records(seed=7, count=8_000)))
    assert not differ, f"{len(differ)} records differ; first ones: {differ[:5]}"


def test_ingest_times_at_the_ends_of_a_long_judge_like_python(spark, settings):
    """The Kafka timestamp column cannot reach them, a BIGINT can: no overflow in the future check."""
    from pyspark.sql import functions as F

    from definitions.events import contract_json
    from stores.kafka_source import register_validator

    record = b'{"event_id":"e1","event_time":"2024-05-01T10:00:00Z","user_id":"u1","url":"/a","event_type":"click"}'
    ends = [2**63 - 1, 2**63 - 1 - 3_600_000, -(2**63), 0, -1]
    frame = spark.createDataFrame([(record, ms) for ms in ends], "value BINARY, ms BIGINT")
    function = register_validator(spark)
    rows = frame.select(
        "ms", F.call_function(function, "value", "ms", F.lit(contract_json(settings.events))).alias("v")
    ).collect()
    jvm = {row.ms: (row.v.reason, row.v.event_time) for row in rows}
    for ms in ends:
        event, reason = verdict(record, ms, settings.events)
        assert jvm[ms] == (reason, event["event_time"] if event else None), ms


def test_zone_offsets_out_of_range_get_the_same_verdict(spark, settings):
    """`+00:99` was read as 99 minutes by both validators; now both refuse it, with the same reason."""
    base = {"event_id": "e", "user_id": "u", "url": "/z", "event_type": "page_view"}
    zones = ["+00:99", "+0060", "-24:00", "+23:59", "-2359", "+05:30", "Z"]
    import json

    corpus = [
        (json.dumps({**base, "event_time": f"2026-11-17T08:00:00{zone}"}).encode(), 1_794_906_000_000 + 86_400_000)
        for zone in zones
    ]
    differ, expected = disagreements(spark, settings.events, corpus)
    assert not differ, differ
    assert [v[0] is None for v in expected.values()] == [False, False, False, True, True, True, True]
