"""Ground truth for the built-in views, from the Kafka log itself (independent of Spark and HDFS).

Reads every record of topic `events`, validates it with the contract, keeps those ingested
before a cutoff, one per event_id (the first by ingest time, partition, offset — as archived),
and evaluates the built-in views in plain Python.
"""

from __future__ import annotations

from collections import defaultdict

from definitions.events import TICK_KEY, InvalidEvent, validate
from definitions.views import GRANULARITIES
from stores.kafka import consumer as kafka_consumer
from stores.kafka import partition


def kafka_events(settings, cutoff_ms: int) -> list[dict]:
    topic = settings.kafka.events_topic
    # Committed records only, as every job reads them: an aborted transaction's records are no events.
    consumer = kafka_consumer(
        settings, "lambda-test-truth", consumer_timeout_ms=3_000, max_poll_records=5_000, fetch_max_bytes=50 * 2**20
    )
    parts = [partition(topic, p) for p in consumer.partitions_for_topic(topic)]
    consumer.assign(parts)
    consumer.seek_to_beginning()
    first: dict[str, tuple] = {}
    for msg in consumer:
        # A tick is the tick key with an empty value, as the jobs tell it (stores.kafka_source); a
        # record its producer stamped (CreateTime, timestamp_type 0) is refused by them.
        if (msg.key == TICK_KEY and msg.value == b"") or msg.timestamp >= cutoff_ms or msg.timestamp_type != 1:
            continue
        try:
            event = validate(msg.value, msg.timestamp)
        except InvalidEvent:
            continue
        event["ingest_time_ms"] = msg.timestamp
        order = (msg.timestamp, msg.partition, msg.offset)
        if event["event_id"] not in first or order < first[event["event_id"]][0]:
            first[event["event_id"]] = (order, event)
    consumer.close()
    return [event for _, event in first.values()]


def view_truth(view_name: str, events: list[dict], granularity: str) -> dict[tuple, int]:
    """{(key parts..., bucket): value} for a built-in view."""
    size_ms = GRANULARITIES[granularity] * 1000
    counts: dict[tuple, int] = defaultdict(int)
    visitors: dict[tuple, set] = defaultdict(set)
    for e in events:
        if e["event_type"] != "page_view":
            continue
        bucket = (e["event_time"] - e["event_time"] % size_ms) // 1000
        if view_name in ("page_views", "top_pages"):
            counts[(e["url"], bucket)] += 1
        elif view_name == "unique_visitors":
            visitors[(e["url"], bucket)].add(e["user_id"])
        elif view_name == "page_views_by_country_device":
            if e["country"] is not None and e["device"] is not None:
                counts[(e["country"], e["device"], bucket)] += 1
        elif view_name == "page_views_by_channel":
            channel = "web" if e["schema_version"] < 2 else e["channel"]  # the view's declared default
            if channel is not None:
                counts[(channel, bucket)] += 1
        else:
            raise KeyError(view_name)
    if view_name == "unique_visitors":
        return {k: len(v) for k, v in visitors.items()}
    return dict(counts)
