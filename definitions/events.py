"""The event contract: one declaration of the clickstream event, its validation and its schemas.

Every part of the platform that reads or writes events uses this module: the generator, the
HTTP ingest, the archiver and the speed layer (through the JVM validator definitions/jvm/
ValidateEvent.java, which reads this contract from `contract_json` and gives the same verdicts and
reasons), and the batch layer (through the master dataset's Spark schema derived from FIELDS).
See docs/events.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from definitions.layer_settings import EventLimits

# The newest contract version this platform reads; it reads every version from 1 up to it. A
# version adds optional fields (Field.since) and nothing else, so an older event is a newer one
# without those fields, and the master dataset keeps old files as they are (docs/events.md).
SCHEMA_VERSION = 2
EVENT_TYPES = ("page_view", "click", "add_to_cart", "purchase", "signup")
DEVICES = ("desktop", "mobile", "tablet", "other")
CHANNELS = ("web", "app", "api")
DEFAULT_LIMITS = EventLimits()
# The record size limit with default settings (settings.events.max_record_bytes).
MAX_EVENT_BYTES = DEFAULT_LIMITS.max_record_bytes
MAX_REASON_CHARS = 300
# Why the parser refused a text: the same words whichever validator (Python or the JVM's) refused it.
MALFORMED = "malformed JSON: not a JSON text (RFC 8259)"

# Records the archiver injects so that ingest-time progress is visible on idle partitions: this
# key and an empty value. A record with this key and any other value is an event like any other.
TICK_KEY = b"\x00lambda-tick"

_COUNTRY = re.compile(r"^[A-Z]{2}$", re.ASCII)
_ISO_TIME = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:?[0-9]{2})$"
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # "string" | "timestamp" | "int"
    required: bool
    max_len: int = 0
    choices: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    doc: str = ""
    # The EventLimits setting that overrides max_len, if any.
    limit_setting: str = ""
    # The schema_version that added the field: an event of an older version must not carry it.
    since: int = 1


FIELDS: tuple[Field, ...] = (
    Field(
        "event_id",
        "string",
        True,
        64,
        doc="unique id of the event; a re-sent event keeps it",
        limit_setting="max_event_id_chars",
    ),
    Field("event_time", "timestamp", True, 40, doc="when it happened, ISO-8601 with a zone (producer clock)"),
    Field(
        "user_id", "string", True, 128, doc="the visitor; also the Kafka record key", limit_setting="max_user_id_chars"
    ),
    Field("url", "string", True, 2048, doc="the page path, starting with '/'", limit_setting="max_url_chars"),
    Field("event_type", "string", True, 32, EVENT_TYPES, doc="what happened"),
    Field("referrer", "string", False, 2048, doc="where the visitor came from", limit_setting="max_referrer_chars"),
    Field("country", "string", False, 2, pattern=_COUNTRY, doc="ISO 3166-1 alpha-2, upper case"),
    Field("device", "string", False, 16, DEVICES, doc="device class"),
    Field("schema_version", "int", False, doc=f"contract version, 1 to {SCHEMA_VERSION}; 1 when absent"),
    Field("channel", "string", False, 8, CHANNELS, doc="where the event came from (schema_version 2)", since=2),
)
FIELD_NAMES = tuple(f.name for f in FIELDS)
_FIELD_SET = frozenset(FIELD_NAMES)


class InvalidEvent(ValueError):
    """An event that breaks the contract; `reason` names the rule and the field (bounded, valid UTF-8)."""

    def __init__(self, reason: str) -> None:
        reason = reason.encode("utf-8", "backslashreplace").decode("utf-8")
        if len(reason) > MAX_REASON_CHARS:
            reason = reason[: MAX_REASON_CHARS - 1] + "…"
        super().__init__(reason)
        self.reason = reason


def shown(text: str, limit: int = 40) -> str:
    """A value as a reason quotes it: its first `limit` code points, escaped as JSON's ASCII form
    (so a reason is printable ASCII whatever the record held; the JVM validator escapes the same)."""
    return json.dumps(text[:limit])[1:-1]


def parse_time(text: str) -> datetime:
    """An ISO-8601 time with a zone, in UTC; ValueError for anything else (never another exception)."""
    matched = _ISO_TIME.match(text)
    if not matched:
        raise ValueError(f"not an ISO-8601 time with a zone: '{shown(text)}'")
    zone = matched.group(2).replace(":", "")
    if zone != "Z" and (int(zone[1:3]) > 23 or int(zone[3:5]) > 59):  # Python reads +00:99 as 99 minutes
        raise ValueError(f"not a valid time: '{shown(text)}'")
    fixed = text.replace("Z", "+00:00")
    # Python's parser accepts at most 6 fractional digits.
    fixed = re.sub(r"\.(\d{6})\d+", r".\1", fixed)
    try:
        return datetime.fromisoformat(fixed).astimezone(UTC)
    except (ValueError, OverflowError):  # month 13, year 1 at +14:00, …
        raise ValueError(f"not a valid time: '{shown(text)}'") from None


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def nesting_depth(data: bytes | str) -> int:
    """How deeply JSON arrays and objects nest in `data` (brackets inside strings do not count).
    One pass, no recursion; malformed input gives some finite depth (the parser rejects it)."""
    text = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    depth = deepest = 0
    in_string = escaped = False
    for byte in text:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def parse_json(data: bytes | str, max_depth: int) -> Any:
    """JSON text (UTF-8) → Python value, or InvalidEvent naming what is wrong. Nesting deeper than
    `max_depth` is refused by a scan before the parser runs, so parsing never recurses deeply."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
        # Cheap bound first: the depth is at most the number of opening brackets.
        if raw.count(b"[") + raw.count(b"{") > max_depth and nesting_depth(raw) > max_depth:
            raise InvalidEvent(f"too deeply nested: JSON nesting deeper than {max_depth}")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidEvent(f"malformed JSON: invalid UTF-8 at byte {exc.start}") from None
    else:
        text = data
        if text.count("[") + text.count("{") > max_depth and nesting_depth(text) > max_depth:
            raise InvalidEvent(f"too deeply nested: JSON nesting deeper than {max_depth}")
    try:
        return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_json_object)
    except RecursionError:
        raise InvalidEvent(f"too deeply nested: JSON nesting deeper than {max_depth}") from None
    except ValueError:  # JSONDecodeError, NaN/Infinity, an integer of too many digits
        raise InvalidEvent(MALFORMED) from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259)")


class _NamedTwice(dict):
    """A JSON object that gave a name twice (`twice`: the first such name). An event is refused for
    it: parsers differ on which value counts (the last here, the first in others)."""

    __slots__ = ("twice",)
    twice: str


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc = dict(pairs)
    if len(doc) == len(pairs):
        return doc
    seen: set[str] = set()
    named = _NamedTwice(doc)
    named.twice = next(name for name, _ in pairs if name in seen or seen.add(name))  # type: ignore[func-returns-value]
    return named


def json_kind(value: Any) -> str:
    """The name a reason gives a parsed JSON value's type (Python's, as the JVM validator says it)."""
    return "dict" if isinstance(value, dict) else type(value).__name__


def validate(
    raw: bytes | str | None, ingest_time_ms: int | None = None, limits: EventLimits | None = None
) -> dict[str, Any]:
    """The event as a typed dict (event_time as epoch milliseconds), or InvalidEvent with the reason.

    A total function: for any input it returns an event or raises InvalidEvent, never another
    exception, and its work is bounded by the record's size (checked first).
    `ingest_time_ms` is when Kafka stored the record; timestamps are judged against it so that
    a replay gives the same verdict. Without it (HTTP ingest), the current time is used.
    """
    limits = limits or DEFAULT_LIMITS
    try:
        if raw is None:
            raise InvalidEvent("empty record: no value")
        data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)
        if len(data) > limits.max_record_bytes:
            raise InvalidEvent(f"oversized: {len(data)} bytes, limit {limits.max_record_bytes}")
        if not data.strip():
            raise InvalidEvent("empty record: no value")
        doc = parse_json(data, limits.max_nesting_depth)
        return validate_document(doc, ingest_time_ms, limits)
    except InvalidEvent:
        raise
    except Exception as exc:  # a rule this module did not foresee: still a verdict, never a crash
        raise InvalidEvent(f"unprocessable record: {type(exc).__name__}") from None


def verdict(
    raw: bytes | str | None, ingest_time_ms: int | None = None, limits: EventLimits | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """(event, None) for a valid record, (None, reason) for any other: never raises."""
    try:
        return validate(raw, ingest_time_ms, limits), None
    except InvalidEvent as exc:
        return None, exc.reason


def validate_document(doc: Any, ingest_time_ms: int | None = None, limits: EventLimits | None = None) -> dict[str, Any]:
    """A parsed JSON value → the typed event, or InvalidEvent (see `validate`)."""
    limits = limits or DEFAULT_LIMITS
    try:
        return _validate_document(doc, ingest_time_ms, limits)
    except InvalidEvent:
        raise
    except Exception as exc:
        raise InvalidEvent(f"unprocessable record: {type(exc).__name__}") from None


def _validate_document(doc: Any, ingest_time_ms: int | None, limits: EventLimits) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise InvalidEvent(f"not a JSON object: got {json_kind(doc)}")
    if isinstance(doc, _NamedTwice):
        raise InvalidEvent(f"duplicate field: {shown(doc.twice)}")
    unknown = [name for name in doc if name not in _FIELD_SET]
    if unknown:
        names = ", ".join(shown(name) for name in sorted(unknown)[:5])
        raise InvalidEvent(f"unknown field(s): {names}")
    event: dict[str, Any] = {}
    for field in FIELDS:
        value = doc.get(field.name)
        if value is None or (value == "" and not field.required):  # an empty optional string is absent
            if field.required:
                raise InvalidEvent(f"missing field: {field.name}")
            event[field.name] = None
            continue
        event[field.name] = _check_field(field, value, limits)
    version = event["schema_version"]
    if version is None:
        version = event["schema_version"] = 1
    elif not 1 <= version <= SCHEMA_VERSION:
        raise InvalidEvent(
            f"unsupported schema_version: {str(version)[:20]} (this platform reads 1 to {SCHEMA_VERSION})"
        )
    for field in FIELDS:
        if field.since > version and event[field.name] is not None:
            raise InvalidEvent(
                f"field of a later schema: {field.name} needs schema_version {field.since} or later, got {version}"
            )
    if not event["url"].startswith("/"):
        raise InvalidEvent("bad url: must be a path starting with '/'")
    reference_ms = ingest_time_ms if ingest_time_ms is not None else int(datetime.now(UTC).timestamp() * 1000)
    if event["event_time"] < limits.min_event_time_s * 1000:
        raise InvalidEvent(f"absurd event_time: before {_floor_text(limits)}")
    if event["event_time"] > reference_ms + limits.max_future_s * 1000:
        raise InvalidEvent(f"absurd event_time: more than {limits.max_future_s}s after ingest time")
    return event


def value_pattern(field: Field) -> str | None:
    """A regular expression (Python's and the Rust regex crate's syntax alike) every valid value of
    text field `field` matches, for checks made outside validate() such as the API's query
    parameters: the field's own pattern, or no control character (and a url is a path); for a number,
    its decimal text as both layers key it (no sign, no leading zero: no event is keyed `01`); None
    for a field of choices or a time."""
    if field.kind == "int":
        return r"^(0|[1-9][0-9]{0,17})$"
    if field.kind != "string" or field.choices:
        return None
    if field.pattern is not None:
        return field.pattern.pattern
    text = r"[^\x00-\x1f\x7f]"
    return rf"^/{text}*$" if field.name == "url" else rf"^{text}+$"


def _floor_text(limits: EventLimits) -> str:
    return datetime.fromtimestamp(limits.min_event_time_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _max_len(field: Field, limits: EventLimits) -> int:
    return int(getattr(limits, field.limit_setting)) if field.limit_setting else field.max_len


def _check_field(field: Field, value: Any, limits: EventLimits) -> Any:
    if field.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidEvent(f"mistyped field: {field.name} must be an integer, got {json_kind(value)}")
        return value
    if not isinstance(value, str):
        raise InvalidEvent(f"mistyped field: {field.name} must be a string, got {json_kind(value)}")
    if not value:
        raise InvalidEvent(f"empty field: {field.name}")
    limit = _max_len(field, limits)
    if limit and len(value) > limit:
        raise InvalidEvent(f"field too long: {field.name} has {len(value)} characters, limit {limit}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidEvent(
                f"invalid Unicode: {field.name} holds a lone surrogate, not a Unicode scalar value"
            ) from None
    if _CONTROL.search(value):
        raise InvalidEvent(f"control character: {field.name} holds a control character")
    if field.choices and value not in field.choices:
        raise InvalidEvent(f"bad value: {field.name}='{shown(value)}', allowed: {', '.join(field.choices)}")
    if field.pattern is not None and not field.pattern.match(value):
        raise InvalidEvent(f"bad value: {field.name}='{shown(value)}'")
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


# Each field kind's Spark type, as archived and as the views read it (event_time a timestamp).
SPARK_TYPES = {"string": "STRING", "timestamp": "TIMESTAMP", "int": "INT"}


def fields_ddl() -> str:
    """The contract's fields as Spark columns (SPARK_TYPES)."""
    return ", ".join(f"{f.name} {SPARK_TYPES[f.kind]}" for f in FIELDS)


# The JVM validator (definitions/jvm/ValidateEvent.java, a Spark UDF) reads the contract from this.
JVM_VALIDATOR_CLASS = "lambdaplatform.contract.ValidateEvent"


def contract_json(limits: EventLimits | None = None) -> str:
    """The contract as the JVM validator reads it: every field, limit and pattern declared above."""
    import sys

    limits = limits or DEFAULT_LIMITS
    return json.dumps(
        {
            "max_record_bytes": limits.max_record_bytes,
            "max_nesting_depth": limits.max_nesting_depth,
            "max_reason_chars": MAX_REASON_CHARS,
            "int_max_str_digits": sys.get_int_max_str_digits(),
            "min_event_time_s": limits.min_event_time_s,
            "max_future_s": limits.max_future_s,
            "floor_text": _floor_text(limits),
            "schema_version": SCHEMA_VERSION,
            "time_pattern": _ISO_TIME.pattern,
            "fields": [
                {
                    "name": f.name,
                    "kind": f.kind,
                    "required": f.required,
                    "max_len": _max_len(f, limits),
                    "choices": list(f.choices),
                    "pattern": f.pattern.pattern if f.pattern is not None else None,
                    "since": f.since,
                }
                for f in FIELDS
            ],
        },
        sort_keys=True,
    )
