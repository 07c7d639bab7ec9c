"""POST /api/v1/events: validated events into Kafka (token required)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Body, HTTPException, Request

from api.deps import MetricsDep, SettingsDep, TokenDep
from definitions.events import MAX_EVENT_BYTES, InvalidEvent, validate_document

router = APIRouter(prefix="/api/v1", tags=["ingest"])


@router.post("/events", status_code=202, dependencies=[TokenDep],
             summary="Validate a batch of events and produce them to Kafka; 422 with per-record errors")
def post_events(request: Request, settings: SettingsDep, metrics: MetricsDep,
                events: list[Any] = Body(..., description="a JSON array of events (the event contract)")) -> dict[str, Any]:
    limit = settings.api.max_events_per_request
    if not events:
        raise HTTPException(422, "no events: send a non-empty JSON array")
    if len(events) > limit:
        raise HTTPException(422, f"too many events: {len(events)}, at most {limit} per request")
    errors, payloads = [], []
    for index, doc in enumerate(events):
        raw = json.dumps(doc, separators=(",", ":")).encode()
        try:
            if len(raw) > MAX_EVENT_BYTES:
                raise InvalidEvent(f"oversized: {len(raw)} bytes, limit {MAX_EVENT_BYTES}")
            event = validate_document(doc)
        except InvalidEvent as exc:
            errors.append({"index": index, "event_id": doc.get("event_id") if isinstance(doc, dict) else None,
                           "error": exc.reason})
            continue
        payloads.append((event["user_id"].encode(), raw))
    if errors:
        metrics.events_rejected.inc(len(errors))
        raise HTTPException(422, {"message": f"{len(errors)} of {len(events)} events are invalid; none was accepted",
                                  "errors": errors})
    producer = request.app.state.producer()
    futures = [producer.send(settings.kafka.events_topic, key=key, value=value) for key, value in payloads]
    try:
        producer.flush(timeout=10)
        positions = [f.get(timeout=10) for f in futures]
    except Exception as exc:
        raise HTTPException(503, {"component": "kafka", "message": f"events not acknowledged by Kafka: {exc}"}) from None
    metrics.events_accepted.inc(len(payloads))
    return {"accepted": len(payloads), "topic": settings.kafka.events_topic,
            "positions": [{"partition": p.partition, "offset": p.offset} for p in positions]}
