"""Validation is a total function: for any bytes, a valid event or a reason; never an exception,
never deep recursion, memory bounded by the record's size. Hypothesis generates the inputs."""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from definitions.events import (
    FIELD_NAMES,
    MAX_REASON_CHARS,
    InvalidEvent,
    nesting_depth,
    parse_json,
    validate,
    validate_document,
    verdict,
)
from definitions.layer_settings import EventLimits
from tests.support.hostile import BASE, CONFIRMED, corpus

INGEST_MS = 1_794_906_000_000  # 2026-11-17T09:00:00Z
LIMITS = EventLimits()
BIG = EventLimits(max_record_bytes=1_000_000)

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def check_verdict(raw, limits: EventLimits = LIMITS) -> tuple[dict | None, str | None]:
    event, reason = verdict(raw, INGEST_MS, limits)
    assert (event is None) != (reason is None)
    if reason is not None:
        assert isinstance(reason, str) and 0 < len(reason) <= MAX_REASON_CHARS
        reason.encode("utf-8")  # a reason is always valid Unicode (it goes into JSON and Arrow)
    else:
        assert set(event) == set(FIELD_NAMES)
        for name, value in event.items():
            if isinstance(value, str):
                value.encode("utf-8")  # no lone surrogates reach Arrow or Parquet
                assert not any(ord(c) < 32 or ord(c) == 127 for c in value), (name, value)
        assert event["url"].startswith("/")
        assert limits.min_event_time_s * 1000 <= event["event_time"] <= INGEST_MS + limits.max_future_s * 1000
    return event, reason


@settings(max_examples=1_500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=6_000))
def test_any_bytes_get_a_verdict(raw):
    check_verdict(raw)


@settings(max_examples=1_000, deadline=None)
@given(st.text(max_size=3_000))
def test_any_text_gets_a_verdict(text):
    check_verdict(text)


@settings(max_examples=1_500, deadline=None)
@given(st.sampled_from(sorted(BASE)), json_values)
def test_any_value_in_any_field_gets_a_verdict(field, value):
    doc = dict(BASE, **{field: value})
    check_verdict(json.dumps(doc, allow_nan=True))
    try:  # the HTTP ingest validates the parsed document
        validate_document(doc, INGEST_MS)
    except InvalidEvent as exc:
        assert exc.reason


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(BASE)) | st.text(max_size=10), json_values, max_size=12))
def test_any_object_gets_a_verdict(doc):
    check_verdict(json.dumps(doc))


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=200_000), st.sampled_from(["[", '{"a":']))
def test_nesting_is_refused_before_parsing(depth, opener):
    closer = "]" if opener == "[" else "}"
    raw = (opener * depth + "0" + closer * depth).encode()
    event, reason = check_verdict(raw, BIG)
    assert event is None
    if len(raw) > BIG.max_record_bytes:
        assert reason.startswith("oversized")
    elif depth > BIG.max_nesting_depth:
        assert reason.startswith("too deeply nested"), reason


@given(
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    st.text(max_size=5),
    st.sampled_from(["url", "user_id", "event_id", "referrer"]),
)
def test_lone_surrogates_are_refused(surrogate, around, field):
    # A lone surrogate (a high one followed by a low one would be a valid pair).
    value = ("/" if field == "url" else "") + around + surrogate + "x"
    raw = json.dumps(dict(BASE, **{field: value}))  # escaped as \\udXXX: valid JSON, invalid Unicode
    _, reason = check_verdict(raw)
    assert reason is not None and reason.startswith("invalid Unicode"), reason


def test_the_confirmed_records_get_reasons():
    reasons = {name: check_verdict(raw)[1] for name, raw in CONFIRMED.items()}
    assert reasons["nested_4000_bytes"].startswith("too deeply nested")
    assert reasons["lone_surrogate_url"].startswith("invalid Unicode: url")
    assert reasons["year_one_plus_14"].startswith("mistyped field: event_time not a valid time")
    assert reasons["event_900_kb"].startswith("oversized: 900")
    # With a record limit that lets it through, the field limit still refuses it.
    assert check_verdict(CONFIRMED["event_900_kb"], BIG)[1].startswith("field too long: referrer")


def test_every_record_of_the_hostile_corpus_is_refused_quickly():
    started = time.perf_counter()
    kinds: dict[str, int] = {}
    for kind, _key, value in corpus(seed=7, count=10_000):
        event, reason = check_verdict(value)
        assert event is None, (kind, value[:200] if value else value)
        kinds[kind] = kinds.get(kind, 0) + 1
    elapsed = time.perf_counter() - started
    assert len(kinds) >= 12 and sum(kinds.values()) == 10_000
    assert elapsed < 20, f"10,000 hostile records took {elapsed:.1f}s"


@pytest.mark.parametrize(
    "raw",
    [
        ("[" * 500_000 + "]" * 500_000).encode()[:999_000],
        json.dumps(dict(BASE, referrer="x" * 990_000)).encode(),
        b'{"url": "' + b"\\ud800" * 150_000 + b'"}',
        b"[" + b"1e999999," * 100_000 + b"1]",
    ],
)
def test_memory_is_bounded_by_the_record_size(raw):
    tracemalloc.start()
    try:
        check_verdict(raw, BIG)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * len(raw) + 1_000_000, f"peak {peak} bytes for a {len(raw)}-byte record"


def test_empty_optional_strings_mean_absent():
    event = validate(json.dumps(dict(BASE, referrer="", country="", device="")), INGEST_MS)
    assert event["referrer"] is None and event["country"] is None and event["device"] is None
    with pytest.raises(InvalidEvent, match="empty field: url"):
        validate(json.dumps(dict(BASE, url="")), INGEST_MS)


def test_an_object_giving_a_name_twice_is_refused_naming_it():
    """Parsers differ on which of two values counts (the last here and in Jackson, the first in
    others): `"event_type":"click","event_type":"purchase"` was a purchase here, maybe a click to
    another reader of the topic."""
    inner = json.dumps(BASE)[1:-1]
    for raw, name in [
        ('{"event_type":"click",' + inner + "}", "event_type"),
        ("{" + inner + ',"zz":1,"zz":2}', "zz"),  # before the unknown field: what is wrong first
        ('{"\\u0075rl":"/x",' + inner + "}", "url"),  # the same name, escaped
    ]:
        with pytest.raises(InvalidEvent, match=f"^duplicate field: {name}$"):
            validate(raw, INGEST_MS)
    # Inside a value it is the value that is wrong; after the object, the text.
    with pytest.raises(InvalidEvent, match="^mistyped field: url must be a string, got dict$"):
        without_url = json.dumps({k: v for k, v in BASE.items() if k != "url"})[1:-1]
        validate('{"url":{"a":1,"a":2},' + without_url + "}", INGEST_MS)
    with pytest.raises(InvalidEvent, match="^malformed JSON"):
        validate('{"event_type":"click",' + inner + "} x", INGEST_MS)


def test_limits_come_from_settings():
    strict = EventLimits(max_url_chars=16, max_record_bytes=512, min_event_time_s=1_790_000_000, max_future_s=0)
    assert (
        verdict(json.dumps(dict(BASE, url="/" + "a" * 20)), INGEST_MS, strict)[1]
        == "field too long: url has 21 characters, limit 16"
    )
    assert verdict(json.dumps(dict(BASE, event_time="2026-09-01T00:00:00Z")), INGEST_MS, strict)[1].startswith(
        "absurd event_time: before 2026-09-21"
    )
    assert (
        verdict(json.dumps(dict(BASE, event_time="2026-11-17T09:00:01Z")), INGEST_MS, strict)[1]
        == "absurd event_time: more than 0s after ingest time"
    )
    assert verdict(json.dumps(dict(BASE, referrer="x" * 600)), INGEST_MS, strict)[1].startswith("oversized")


def test_nesting_depth_ignores_brackets_in_strings():
    assert nesting_depth(b'{"url": "/[[[[{{{{"}') == 1
    assert nesting_depth(b'{"a": "\\"[[[", "b": [[1]]}') == 3
    assert parse_json(b'{"url": "/[[[[[[[[[[[["}', 1) == {"url": "/[[[[[[[[[[[["}
    with pytest.raises(InvalidEvent, match="too deeply nested"):
        parse_json(b"[[[[1]]]]", 3)
