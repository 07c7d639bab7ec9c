"""POST /api/v1/events: validated events into Kafka (token required).

The order bounds the work a request can cause: the token (a header) is checked first, then the
declared Content-Length against api.max_body_bytes, then the body is read in chunks and refused
as soon as it passes the cap; only then is it parsed (nesting bounded before the parser runs) and
each event validated (settings.events). Nothing reaches Kafka unless every event is valid.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from api.deps import TokenDep, held_body
from api.errors import ApiError, error_responses
from api.thread_calls import in_thread
from definitions import events as contract
from definitions.events import FIELDS, SCHEMA_VERSION, InvalidEvent, json_kind, parse_json, validate_document
from definitions.settings import Settings

log = logging.getLogger("lambda.api")


class Position(BaseModel):
    partition: int
    offset: int


class Accepted(BaseModel):
    accepted: int = Field(description="how many events Kafka acknowledged")
    topic: str
    positions: list[Position]


# The validator's own pattern for event_time (a stricter documented one would call "invalid" some
# times it accepts).
_EVENT_TIME = getattr(contract, "_ISO_TIME", None)
_PRINTABLE = "[^\\u0000-\\u001f\\u007f]"  # the validator refuses control characters in any string


def event_schema(settings: Settings) -> dict[str, Any]:
    """The JSON schema of one event, from the event contract (definitions/events.py). An optional
    field may also be null or "" (both mean absent)."""
    properties: dict[str, Any] = {}
    for field in FIELDS:
        schema: dict[str, Any] = {"description": field.doc}
        if field.kind == "int":
            versions = list(range(1, SCHEMA_VERSION + 1))
            schema.update(type="integer", enum=versions if field.name == "schema_version" else None)
        else:
            setting = getattr(field, "limit_setting", "")
            max_len = int(getattr(settings.events, setting)) if setting else field.max_len
            schema.update(type="string", maxLength=max_len or None, pattern=f"^{_PRINTABLE}*$")
            if field.name == "url":
                schema["pattern"] = f"^/{_PRINTABLE}*$"
            if field.kind == "timestamp" and _EVENT_TIME is not None:
                schema["pattern"] = _EVENT_TIME.pattern
            if field.pattern is not None:
                schema["pattern"] = field.pattern.pattern
            if field.choices:
                schema["enum"] = list(field.choices)
            if field.required:
                schema["minLength"] = 1
            elif "enum" in schema:
                schema["enum"].append("")
            elif field.pattern is not None:
                schema["pattern"] = f"^({field.pattern.pattern.strip('^$')})?$"
        if not field.required:
            schema["type"] = [schema["type"], "null"]
            if "enum" in schema and schema["enum"] is not None:
                schema["enum"].append(None)
        properties[field.name] = {k: v for k, v in schema.items() if v is not None}
    # A field added by a later schema_version needs an event of that version (absent means 1).
    later = [
        {
            "if": {"properties": {f.name: {"type": "string", "minLength": 1}}, "required": [f.name]},
            "then": {"properties": {"schema_version": {"minimum": f.since}}, "required": ["schema_version"]},
        }
        for f in FIELDS
        if f.since > 1
    ]
    return {
        "type": "object",
        "properties": properties,
        "allOf": later,
        "additionalProperties": False,
        "required": [f.name for f in FIELDS if f.required],
        "description": "an event (docs/events.md); its event_time at most "
        f"{settings.events.max_future_s}s ahead of now and not before "
        f"{settings.events.min_event_time_s} (epoch seconds)",
    }


def request_body_doc(settings: Settings) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "description": (
                f"a JSON array of 1 to {settings.api.max_events_per_request} events, at most "
                f"{settings.api.max_body_bytes} bytes; each at most {settings.events.max_record_bytes} bytes as JSON"
            ),
            "content": {
                "application/json": {
                    "schema": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": settings.api.max_events_per_request,
                        "items": event_schema(settings),
                    },
                    "example": [
                        {
                            "event_id": "3f1c6a52-0d7e-4c8e-9a57-2f1e1b0c9d11",
                            "event_time": "2026-11-21T10:00:00.123Z",
                            "user_id": "u-829",
                            "url": "/products/42",
                            "event_type": "page_view",
                            "referrer": "https://example.com/",
                            "country": "DE",
                            "device": "mobile",
                            "schema_version": 2,
                            "channel": "web",
                        }
                    ],
                }
            },
        }
    }


# A body larger than this waits for the large bodies parsed before it (events_router).
LARGE_BODY_BYTES = 64 * 1024
# Produces run at once per worker process: while Kafka is slow or away, each holds a worker thread
# for up to ~15 s (KAFKA_ACK_S, after up to 5 s for the brokers' metadata), and forty at once took
# every thread view queries run on. A request waits for one of these (holding no thread) for at
# most PRODUCE_WAIT_S, then is a 503 naming Kafka.
PRODUCE_THREADS = 4
PRODUCE_WAIT_S = 10.0
# How long the producer tries to write a record (its delivery timeout, api.app): a request's 503
# comes when its own records are given up, so none is written later behind the client's back (with
# kafka-python's two minutes, a 503's events were written once Kafka came back, and the client's
# re-send made second copies). A record being written at that moment may still be stored: the 503
# asks for the same event_ids, whose copies both layers count once.
KAFKA_ACK_S = 10.0
# A 503 naming Kafka: when to send again.
KAFKA_RETRY_AFTER_S = 5


def json_text(headers) -> None:
    """A 415 naming the body's form unless it is JSON text in UTF-8 (a Content-Type left out is
    taken as JSON): a gzipped body was read as text ("invalid UTF-8 at byte 1")."""
    for given in headers.getlist("content-encoding"):  # every copy: a second one may say gzip
        for encoding in (e.strip().lower() for e in given.split(",")):
            if encoding not in ("", "identity"):
                raise ApiError(
                    415, f"Content-Encoding {encoding[:40]}: send the body uncompressed, as application/json"
                )
    for given in headers.getlist("content-type"):
        media, *options = (part.strip() for part in given.split(";"))
        if media and media.lower() != "application/json" and not media.lower().endswith("+json"):
            raise ApiError(415, f"Content-Type {media[:60]}: send the events as application/json (a JSON array)")
        for option in options:
            name, _, value = option.partition("=")
            charset = value.strip().strip('"').lower()
            if name.strip().lower() == "charset" and charset not in ("utf-8", "utf8"):
                raise ApiError(415, f"charset {charset[:40]}: send application/json in UTF-8")


def check_events(settings: Settings, data: bytes) -> list[tuple[bytes, bytes]]:
    """(key, value) for Kafka of every event in the body, or an ApiError saying what is wrong."""
    payloads, refusal = _checked(settings, data)
    if refusal is not None:
        # Raised here, once _checked's frame is gone: raised there, its traceback held the parsed body
        # (up to ~1.4 million objects) in a reference cycle that only a full collection frees, and the
        # API makes those rare (api.server.quiet_full_collections).
        try:
            raise refusal
        finally:  # a frame holding the exception it raised is held by it (its traceback): a cycle
            del refusal
    return payloads


def _check_taken(settings: Settings, body: list[bytes]) -> list[tuple[bytes, bytes]]:
    """check_events of the bytes `body` holds, taken out of it (see events_router)."""
    return check_events(settings, body.pop())


def _checked(settings: Settings, data: bytes) -> tuple[list[tuple[bytes, bytes]], ApiError | None]:
    """check_events' payloads, or the ApiError to raise, made (not raised) here."""
    limit = settings.api.max_events_per_request
    if not data.strip():
        return [], ApiError(422, "no events: send a non-empty JSON array of events")
    try:
        events = parse_json(data, max_depth=settings.events.max_nesting_depth + 1)
    except InvalidEvent as exc:
        return [], ApiError(400, f"body: {exc.reason}")
    if not isinstance(events, list):
        return [], ApiError(422, f"body: a JSON array of events is expected, got a JSON {json_kind(events)}")
    if not events:
        return [], ApiError(422, "no events: send a non-empty JSON array of events")
    if len(events) > limit:
        return [], ApiError(422, f"too many events: {len(events)}, at most {limit} per request")
    max_bytes = settings.events.max_record_bytes
    errors, payloads = [], []
    for index, doc in enumerate(events):
        try:
            # UTF-8 as Kafka holds it (an escaped character counted 6 bytes); a lone surrogate is
            # kept as is for the contract to refuse, naming it.
            raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")
            if len(raw) > max_bytes:
                raise InvalidEvent(f"oversized: {len(raw)} bytes, limit {max_bytes}")
            event = validate_document(doc, None, settings.events)
        except InvalidEvent as exc:
            event_id = doc.get("event_id") if isinstance(doc, dict) else None
            errors.append(
                {"index": index, "event_id": event_id if isinstance(event_id, str) else None, "error": exc.reason}
            )
            continue
        payloads.append((event["user_id"].encode(), raw))
    if errors:
        return [], ApiError(422, f"{len(errors)} of {len(events)} events are invalid; none was accepted", errors=errors)
    return payloads, None


def produce(request: Request, settings: Settings, payloads: list[tuple[bytes, bytes]]) -> list:
    """Each event's Kafka position, once Kafka acknowledged all of them. Waits for this request's own
    records only: the producer's flush waited for every record the worker's producer held, so a
    partition Kafka did not take made every POST a 503, events stored and all. Each record fails
    by its delivery timeout (KAFKA_ACK_S); the deadline here is a backstop."""
    producer = request.app.state.producer()
    futures, failure = [], None
    for key, value in payloads:
        try:
            futures.append(producer.send(settings.kafka.events_topic, key=key, value=value))
        except Exception as exc:  # no partitions known within max_block_ms: the rest is not sent
            failure = exc
            break
    # Every record sent is waited for, one failed or not: a 503 at the first failure left the others
    # to be written after it, behind the client's back.
    deadline = time.monotonic() + KAFKA_ACK_S + 5
    positions = []
    for future in futures:
        try:
            positions.append(future.get(timeout=max(0.0, deadline - time.monotonic())))
        except Exception as exc:
            failure = failure or exc
    if failure is not None:
        try:
            raise failure
        finally:  # this frame would hold the exception it raised, and the exception this frame: a cycle
            del failure
    return positions


def events_router(settings: Settings) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["ingest"])
    # Large bodies are parsed one at a time per worker process: a body of tiny items parses into
    # ~25x its size (4 MiB of `{},` → ~100 MB), and 40 threads at once made that ~4 GB. Small ones
    # (their worst case ~1.6 MB each) never wait behind a large one. Waiting requests hold no thread.
    large = asyncio.Semaphore(1)
    producing = asyncio.Semaphore(PRODUCE_THREADS)

    @router.post(
        "/events",
        status_code=202,
        dependencies=[TokenDep],
        response_model=None,
        summary="Validate a batch of events and produce them to Kafka; 422 with per-record errors",
        responses={202: {"model": Accepted}, **error_responses(400, 401, 413, 415, 422, 503)},
        openapi_extra=request_body_doc(settings),
    )
    async def post_events(request: Request) -> dict[str, Any]:
        metrics = request.app.state.metrics
        json_text(request.headers)  # before the body is read
        # The body's room (api.max_bodies_mib) is held until it is answered: its events are too.
        async with held_body(request, settings.api.max_body_bytes) as data:
            return await _accept(request, metrics, data)

    async def _accept(request: Request, metrics, data: bytes) -> dict[str, Any]:
        try:
            async with large if len(data) > LARGE_BODY_BYTES else contextlib.nullcontext():
                # in_thread (api/thread_calls): a refusal raised across the pool kept the body; and
                # the body goes in a list the check empties, as the pool's idle thread keeps its last
                # call's arguments until its next call.
                payloads = await in_thread(_check_taken, settings, [data])
        except ApiError as exc:
            if exc.errors:
                metrics.events_rejected.inc(len(exc.errors))
            raise
        count = len(payloads)
        try:
            async with asyncio.timeout(PRODUCE_WAIT_S):  # a cancelled acquire takes no slot
                await producing.acquire()
        except TimeoutError:
            log.warning("no produce slot within %gs: Kafka is slow to acknowledge", PRODUCE_WAIT_S)
            raise ApiError(
                503,
                "Kafka is slow to acknowledge events; none of these was sent, send them again",
                component="kafka",
                headers={"Retry-After": str(KAFKA_RETRY_AFTER_S)},
            ) from None
        try:
            positions = await in_thread(produce, request, settings, payloads)
        except Exception as exc:  # the driver's words (hosts, ports) go to the log only
            # the text, not the exception: a log record kept (a test's capture) would hold its frames
            log.warning("events not acknowledged by Kafka: %s: %s", type(exc).__name__, str(exc)[:500])
            raise ApiError(
                503,
                "events not acknowledged by Kafka (slow or away); none may be assumed stored: send them again with "
                "the same event_ids (copies of an event_id are counted once)",
                component="kafka",
                headers={"Retry-After": str(KAFKA_RETRY_AFTER_S)},
            ) from None
        finally:
            producing.release()
            payloads.clear()  # the pool's idle threads keep this list (their last call's argument, result)
        metrics.events_accepted.inc(count)
        return {
            "accepted": count,
            "topic": settings.kafka.events_topic,
            "positions": [{"partition": p.partition, "offset": p.offset} for p in positions],
        }

    return router
