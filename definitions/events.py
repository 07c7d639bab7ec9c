"""The event contract: one declaration of the clickstream event, its validation and its schemas.

Every part of the platform that reads or writes events uses this module: the generator, the
HTTP ingest, the archiver and the speed layer (through the same Python validator, run inside
Spark), and the batch layer (through the master dataset's Spark schema derived from FIELDS).
See docs/events.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

SCHEMA_VERSION = 1
MAX_EVENT_BYTES = 4096
# An event may claim to have happened at most this far after Kafka stored it (clock skew).
MAX_FUTURE_S = 3600
EVENT_TYPES = ("page_view", "click", "add_to_cart", "purchase", "signup")
DEVICES = ("desktop", "mobile", "tablet", "other")

# Records the archiver injects so that ingest-time progress is visible on idle partitions.
TICK_KEY = b"\x00lambda-tick"

_COUNTRY = re.compile(r"^[A-Z]{2}$")
_ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:?\d{2})$")


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # "string" | "timestamp" | "int"
    required: bool
    max_len: int = 0
    choices: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    doc: str = ""


FIELDS: tuple[Field, ...] = (
    Field("event_id", "string", True, 64, doc="unique id of the event; a re-sent event keeps it"),
    Field("event_time", "timestamp", True, 40, doc="when it happened, ISO-8601 with a zone (producer clock)"),
    Field("user_id", "string", True, 128, doc="the visitor; also the Kafka record key"),
    Field("url", "string", True, 2048, doc="the page path, starting with '/'"),
    Field("event_type", "string", True, 32, EVENT_TYPES, doc="what happened"),
    Field("referrer", "string", False, 2048, doc="where the visitor came from"),
    Field("country", "string", False, 2, pattern=_COUNTRY, doc="ISO 3166-1 alpha-2, upper case"),
    Field("device", "string", False, 16, DEVICES, doc="device class"),
    Field("schema_version", "int", False, doc=f"contract version; {SCHEMA_VERSION} when absent"),
)
FIELD_NAMES = tuple(f.name for f in FIELDS)


class InvalidEvent(ValueError):
    """An event that breaks the contract; `reason` names the rule and the field."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_time(text: str) -> datetime:
    if not _ISO_TIME.match(text):
        raise ValueError(f"not an ISO-8601 time with a zone: {text[:40]!r}")
    fixed = text.replace("Z", "+00:00")
    # Python's parser accepts at most 6 fractional digits.
    fixed = re.sub(r"\.(\d{6})\d+", r".\1", fixed)
    return datetime.fromisoformat(fixed).astimezone(timezone.utc)


def format_time(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def validate(raw: bytes | str | None, ingest_time_ms: int | None = None) -> dict[str, Any]:
    """The event as a typed dict (event_time as epoch milliseconds), or InvalidEvent with the reason.

    `ingest_time_ms` is when Kafka stored the record; timestamps are judged against it so that
    a replay gives the same verdict. Without it (HTTP ingest), the current time is used.
    """
    if raw is None:
        raise InvalidEvent("empty record: no value")
    data = raw.encode() if isinstance(raw, str) else bytes(raw)
    if len(data) > MAX_EVENT_BYTES:
        raise InvalidEvent(f"oversized: {len(data)} bytes, limit {MAX_EVENT_BYTES}")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidEvent(f"malformed JSON: {exc.__class__.__name__}: {str(exc)[:80]}") from None
    return validate_document(doc, ingest_time_ms)


def validate_document(doc: Any, ingest_time_ms: int | None = None) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise InvalidEvent(f"not a JSON object: got {type(doc).__name__}")
    unknown = sorted(set(doc) - set(FIELD_NAMES))
    if unknown:
        raise InvalidEvent(f"unknown field(s): {', '.join(unknown)[:100]}")
    event: dict[str, Any] = {}
    for field in FIELDS:
        value = doc.get(field.name)
        if value is None:
            if field.required:
                raise InvalidEvent(f"missing field: {field.name}")
            event[field.name] = None
            continue
        event[field.name] = _check_field(field, value)
    version = event["schema_version"]
    if version is None:
        event["schema_version"] = SCHEMA_VERSION
    elif version != SCHEMA_VERSION:
        raise InvalidEvent(f"unsupported schema_version: {version} (this platform reads {SCHEMA_VERSION})")
    if not event["url"].startswith("/"):
        raise InvalidEvent("bad url: must be a path starting with '/'")
    reference_ms = ingest_time_ms if ingest_time_ms is not None else int(datetime.now(timezone.utc).timestamp() * 1000)
    if event["event_time"] < 0:
        raise InvalidEvent("absurd event_time: before 1970-01-01")
    if event["event_time"] > reference_ms + MAX_FUTURE_S * 1000:
        raise InvalidEvent(f"absurd event_time: more than {MAX_FUTURE_S}s after ingest time")
    return event


def _check_field(field: Field, value: Any) -> Any:
    if field.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidEvent(f"mistyped field: {field.name} must be an integer, got {type(value).__name__}")
        return value
    if not isinstance(value, str):
        raise InvalidEvent(f"mistyped field: {field.name} must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidEvent(f"empty field: {field.name}")
    if field.max_len and len(value) > field.max_len:
        raise InvalidEvent(f"field too long: {field.name} has {len(value)} characters, limit {field.max_len}")
    if field.choices and value not in field.choices:
        raise InvalidEvent(f"bad value: {field.name}={value[:40]!r}, allowed: {', '.join(field.choices)}")
    if field.pattern is not None and not field.pattern.match(value):
        raise InvalidEvent(f"bad value: {field.name}={value[:40]!r}")
    if field.kind == "timestamp":
        try:
            moment = parse_time(value)
        except ValueError as exc:
            raise InvalidEvent(f"mistyped field: event_time {exc}") from None
        return int(moment.timestamp() * 1000)
    return value


# --- Spark side ---------------------------------------------------------------------------------

def event_struct_ddl() -> str:
    """The validated event as a Spark struct DDL, derived from FIELDS (event_time as epoch ms)."""
    types = {"string": "STRING", "timestamp": "BIGINT", "int": "INT"}
    return ", ".join(f"{f.name} {types[f.kind]}" for f in FIELDS)


VALIDATION_DDL = f"reason STRING, {event_struct_ddl()}"
