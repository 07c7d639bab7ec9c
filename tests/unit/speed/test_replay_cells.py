"""The speed layer's aggregation on a static read of Kafka, as a replay runs it (local Spark, no
service): each event counts once, in the ingest bucket of its first copy; the static read
de-duplicates as the batch layer does, and a stream only with the operator named."""

from __future__ import annotations

from datetime import datetime

import pytest

from definitions.settings import Settings
from definitions.views import PAGE_VIEWS
from speed_layer.first_copies import first_copies_within_window
from speed_layer.job import cells_by_ingest_bucket

COLUMNS = (
    "reason STRING, event_id STRING, event_time TIMESTAMP, user_id STRING, url STRING, event_type STRING, "
    "referrer STRING, country STRING, device STRING, schema_version INT, channel STRING, "
    "kafka_partition INT, kafka_offset BIGINT, ingest_time TIMESTAMP"
)


def record(event_id: str, partition: int, offset: int, ingested: datetime, reason: str | None = None) -> tuple:
    when = datetime(2026, 11, 20, 10)
    return (reason, event_id, when, "u1", "/a", "page_view", None, None, None, 1, None, partition, offset, ingested)


def test_a_replay_counts_each_event_once_in_the_bucket_of_its_first_copy(spark, settings):
    rows = [
        record("e1", 1, 3, datetime(2026, 11, 20, 10, 3, 5)),  # a later copy, on another partition
        record("e1", 0, 5, datetime(2026, 11, 20, 10, 0, 5)),  # the first copy
        record("e2", 1, 4, datetime(2026, 11, 20, 10, 4, 5)),
        record("bad", 1, 6, datetime(2026, 11, 20, 10, 4, 6), reason="missing field: url"),
    ]
    events = spark.createDataFrame(rows, COLUMNS)
    assert not events.isStreaming
    got = cells_by_ingest_bucket(events, [PAGE_VIEWS], settings).where("granularity = 'hour'").collect()
    bucket_s = settings.ingest_bucket_s
    first = int(datetime(2026, 11, 20, 10, 0, 5).timestamp()) // bucket_s * bucket_s
    second = int(datetime(2026, 11, 20, 10, 4, 5).timestamp()) // bucket_s * bucket_s
    by_bucket: dict[int, int] = {}
    for row in got:
        by_bucket[row.ingest_bucket] = by_bucket.get(row.ingest_bucket, 0) + row.n
    assert sum(by_bucket.values()) == 2 and by_bucket[first] >= 1 and by_bucket[second] >= 1, by_bucket


def test_a_stream_is_not_aggregated_without_the_operator_its_state_is_made_by(spark, settings, tmp_path):
    """The streaming job passes its checkpoint's operator; a stream given none is refused, saying
    what is missing, rather than run with an operator its checkpoint's state may not be made by."""
    (tmp_path / "in").mkdir()
    stream = spark.readStream.schema(COLUMNS).json((tmp_path / "in").as_uri())
    assert stream.isStreaming
    with pytest.raises(ValueError, match="de-duplication operator"):
        cells_by_ingest_bucket(stream, [PAGE_VIEWS], settings)


def test_the_first_copies_of_a_stream_need_the_operator_named():
    with pytest.raises(TypeError):
        first_copies_within_window(None, Settings())  # type: ignore[call-arg]
