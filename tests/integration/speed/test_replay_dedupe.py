"""A replay de-duplicates as the running speed layer does (local Spark and the contract's JVM
validator; no store): a copy of an event whose first copy was ingested shortly before the replay's
`--from` is dropped, as the speed layer's de-duplication window drops it, and is not counted again."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from definitions.view_loading import load_views
from speed_layer.job import cells_by_ingest_bucket
from stores.kafka_source import validated_events

FROM_MS = 1_795_000_020_000 // 60_000 * 60_000  # a whole minute: the replay's --from


def _event(event_id: str, url: str) -> bytes:
    moment = datetime.fromtimestamp(FROM_MS / 1000 - 30, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    doc = {
        "event_id": event_id,
        "event_time": moment,
        "user_id": "u-1",
        "url": url,
        "event_type": "page_view",
        "referrer": None,
        "country": "DE",
        "device": "mobile",
        "schema_version": 1,
    }
    return json.dumps(doc).encode()


def test_a_copy_after_from_of_an_event_first_ingested_within_the_window_before_it_is_not_counted(spark, settings):
    records = [  # (event id, url, ingest time): Kafka rows as a static read of the topic gives them
        ("straddles", "/dup", FROM_MS - 20_000),  # first copy: before --from (the batch layer counts it)
        ("straddles", "/dup", FROM_MS + 5_000),  # its copy, within the window: the speed layer drops it
        ("fresh", "/one", FROM_MS + 6_000),
        ("fresh", "/one", FROM_MS + 7_000),  # a copy after --from of an event first ingested after it
        ("old", "/one", FROM_MS - 10_000),  # before --from only: not the replay's to count
    ]
    rows = [
        (b"k", _event(eid, url), settings.kafka.events_topic, 0, offset, datetime.fromtimestamp(ms / 1000, UTC), 1)
        for offset, (eid, url, ms) in enumerate(records)
    ]
    raw = spark.createDataFrame(
        rows,
        "key BINARY, value BINARY, topic STRING, partition INT, offset LONG, timestamp TIMESTAMP, timestampType INT",
    )
    events = validated_events(raw, settings.events)
    assert events.where("reason IS NOT NULL").count() == 0, events.where("reason IS NOT NULL").collect()
    page_views = load_views(settings)["page_views"]
    cells = cells_by_ingest_bucket(events, [page_views], settings, count_from_ms=FROM_MS)
    minute = {tuple(r["key"]): r["n"] for r in cells.where("granularity = 'minute'").collect()}
    assert minute == {("/one",): 1}, minute
