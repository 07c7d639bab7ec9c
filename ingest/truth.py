"""Ground truth from what the generator sent: the answers a perfect platform would give.

Computed independently of Spark, straight from the sent records: only valid events count, each
event_id once (a re-sent duplicate is the same event), bucketed by event time. Each record's verdict
must be the one the generator sent it for: the contract judges the platform's records too, so a
truth that followed its verdict alone would change with it, and a test comparing the two would pass
whatever the contract wrongly accepted or refused.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime

from definitions.events import InvalidEvent, validate
from definitions.layer_settings import EventLimits
from definitions.views import GRANULARITIES
from ingest.generator import INVALID_KINDS, SentRecord


class VerdictMismatch(ValueError):
    """A sent record the contract judged otherwise than the generator meant it."""


def distinct_events(sent: Iterable[SentRecord], limits: EventLimits | None = None) -> list[dict]:
    """Valid events, de-duplicated by event_id (first arrival wins), as typed dicts, judged under
    `limits` (the platform's `events` settings; the defaults without). VerdictMismatch when a record
    sent as an event is refused or one sent as invalid is accepted."""
    seen: set[str] = set()
    events = []
    for record in sent:
        try:
            event = validate(record.value, record.ingest_time_ms, limits)
        except InvalidEvent as refused:
            if record.kind not in INVALID_KINDS:
                raise VerdictMismatch(
                    f"the record at partition {record.partition} offset {record.offset}, sent as {record.kind}, "
                    f"is refused: {refused}"
                ) from None
            continue
        if record.kind in INVALID_KINDS:
            raise VerdictMismatch(
                f"the record at partition {record.partition} offset {record.offset}, sent as {record.kind}, "
                "is accepted as an event"
            )
        if event["event_id"] in seen:
            continue
        seen.add(event["event_id"])
        event["ingest_time_ms"] = record.ingest_time_ms
        events.append(event)
    return events


def page_view_truth(events: Iterable[dict], granularity: str = "hour") -> dict[str, dict[str, dict[str, int]]]:
    """{url: {bucket start (ISO): {"page_views": n, "unique_visitors": n}}} over page_view events."""
    size_ms = GRANULARITIES[granularity] * 1000
    views: dict[tuple[str, int], int] = defaultdict(int)
    visitors: dict[tuple[str, int], set[str]] = defaultdict(set)
    for e in events:
        if e["event_type"] != "page_view":
            continue
        key = (e["url"], e["event_time"] - e["event_time"] % size_ms)
        views[key] += 1
        visitors[key].add(e["user_id"])
    out: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
    for (url, start), n in sorted(views.items()):
        bucket = datetime.fromtimestamp(start / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        out[url][bucket] = {"page_views": n, "unique_visitors": len(visitors[(url, start)])}
    return dict(out)


def write_truth(sent: Iterable[SentRecord], granularity: str, path, limits: EventLimits | None = None) -> None:
    events = distinct_events(sent, limits)
    doc = {"granularity": granularity, "events": len(events), "views": page_view_truth(events, granularity)}
    with open(path, "w") as handle:
        json.dump(doc, handle, indent=1, sort_keys=True)
