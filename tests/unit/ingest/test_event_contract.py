"""The event contract's validation rules, one by one."""

from __future__ import annotations

import json

import pytest

from definitions.events import FIELDS, MAX_EVENT_BYTES, InvalidEvent, event_struct_ddl, validate

INGEST_MS = 1_794_906_000_000  # 2026-11-17T09:00:00Z


def event(**changes) -> dict:
    doc = {
        "event_id": "3f1c0e2a-1111-4222-8333-944455556666",
        "event_time": "2026-11-17T08:00:00.123Z",
        "user_id": "u-829",
        "url": "/products/42",
        "event_type": "page_view",
        "referrer": "https://www.google.com/",
        "country": "DE",
        "device": "mobile",
        "schema_version": 1,
    }
    doc.update(changes)
    return {k: v for k, v in doc.items() if v is not _DROP}


_DROP = object()


def reason(doc_or_raw, ingest_ms: int | None = INGEST_MS) -> str:
    raw = doc_or_raw if isinstance(doc_or_raw, (bytes, str)) or doc_or_raw is None else json.dumps(doc_or_raw)
    with pytest.raises(InvalidEvent) as err:
        validate(raw, ingest_ms)
    return err.value.reason


def test_a_valid_event_is_typed():
    got = validate(json.dumps(event()), INGEST_MS)
    assert got["event_time"] == 1_794_902_400_123  # 2026-11-17T08:00:00.123Z
    assert got["user_id"] == "u-829" and got["schema_version"] == 1


def test_event_time_is_parsed_to_epoch_ms_in_utc():
    got = validate(json.dumps(event(event_time="2026-11-17T09:00:00.5+01:00")), INGEST_MS)
    assert (
        got["event_time"] == validate(json.dumps(event(event_time="2026-11-17T08:00:00.500Z")), INGEST_MS)["event_time"]
    )


def test_optional_fields_may_be_absent_and_version_defaults():
    got = validate(json.dumps(event(referrer=_DROP, country=None, device=_DROP, schema_version=_DROP)), INGEST_MS)
    assert got["referrer"] is None and got["country"] is None and got["schema_version"] == 1


@pytest.mark.parametrize("name", [f.name for f in FIELDS if f.required])
def test_missing_required_field(name):
    assert reason(event(**{name: _DROP})) == f"missing field: {name}"


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"user_id": 829}, "mistyped field: user_id must be a string, got int"),
        ({"url": ["/"]}, "mistyped field: url must be a string, got list"),
        ({"schema_version": "1"}, "mistyped field: schema_version must be an integer, got str"),
        ({"schema_version": True}, "mistyped field: schema_version must be an integer, got bool"),
        ({"event_time": 1700000000}, "mistyped field: event_time must be a string, got int"),
    ],
)
def test_mistyped_fields(changes, expected):
    assert reason(event(**changes)) == expected


def test_event_time_must_be_iso_with_zone():
    assert reason(event(event_time="2026-11-17 08:00:00")).startswith("mistyped field: event_time not an ISO-8601 time")
    assert reason(event(event_time="2026-11-17T08:00:00")).startswith("mistyped field: event_time")


@pytest.mark.parametrize("zone", ["+00:99", "+0060", "-24:00", "+99:00", "+2400"])
def test_a_zone_offset_is_hours_0_to_23_and_minutes_0_to_59(zone):
    """RFC 3339's offset: both validators read `+00:99` as 99 minutes, an instant the producer never meant."""
    got = reason(event(event_time=f"2026-11-17T08:00:00{zone}"))
    assert got.startswith("mistyped field: event_time not a valid time"), got


def test_the_widest_zone_offsets_are_valid():
    for zone in ("+23:59", "-2359", "+05:30", "-00:00"):
        validate(json.dumps(event(event_time=f"2026-11-17T08:00:00{zone}")), INGEST_MS + 86_400_000)


def test_absurd_timestamps():
    assert reason(event(event_time="1969-07-20T20:17:40Z")) == "absurd event_time: before 2000-01-01T00:00:00Z"
    assert reason(event(event_time="2999-01-01T00:00:00Z")).startswith("absurd event_time: more than")


def test_late_events_are_valid():
    validate(json.dumps(event(event_time="2026-11-10T08:00:00Z")), INGEST_MS)


def test_future_is_judged_against_ingest_time_not_the_clock():
    doc = json.dumps(event(event_time="2026-11-17T09:30:00Z"))
    validate(doc, INGEST_MS)  # 30 minutes after ingest: within the clock-skew allowance
    assert reason(doc, ingest_ms=INGEST_MS - 86_400_000).startswith("absurd event_time")


def test_choices_and_patterns():
    assert reason(event(event_type="pageview")).startswith("bad value: event_type='pageview'")
    assert reason(event(device="fridge")).startswith("bad value: device")
    assert reason(event(country="de")) == "bad value: country='de'"
    assert reason(event(url="products/42")) == "bad url: must be a path starting with '/'"
    assert reason(event(schema_version=3)) == "unsupported schema_version: 3 (this platform reads 1 to 2)"
    assert reason(event(schema_version=0)).startswith("unsupported schema_version: 0")
    assert reason(event(schema_version=-(10**30))).startswith("unsupported schema_version: -1000000000000000000")


def test_version_2_adds_an_optional_channel():
    got = validate(json.dumps(event(schema_version=2, channel="app")), INGEST_MS)
    assert got["schema_version"] == 2 and got["channel"] == "app"
    assert validate(json.dumps(event(schema_version=2)), INGEST_MS)["channel"] is None  # optional in version 2
    assert validate(json.dumps(event()), INGEST_MS)["channel"] is None  # a version 1 event has none
    assert reason(event(schema_version=2, channel="fax")).startswith("bad value: channel='fax'")


@pytest.mark.parametrize("version", [1, _DROP])
def test_a_version_1_event_cannot_carry_a_version_2_field(version):
    assert (
        reason(event(schema_version=version, channel="web"))
        == "field of a later schema: channel needs schema_version 2 or later, got 1"
    )
    # An empty optional string means absent, so it is no version-2 field.
    assert validate(json.dumps(event(schema_version=version, channel="")), INGEST_MS)["channel"] is None


def test_limits():
    assert reason(event(user_id="u" * 129)) == "field too long: user_id has 129 characters, limit 128"
    assert reason(event(event_id="")) == "empty field: event_id"
    big = json.dumps(event(referrer="x" * MAX_EVENT_BYTES))
    assert reason(big) == f"oversized: {len(big.encode())} bytes, limit {MAX_EVENT_BYTES}"


def test_malformed_inputs():
    assert reason(b'{"event_id": "a"').startswith("malformed JSON")
    assert reason(b"\xff\xfe\x00garbage").startswith("malformed JSON")
    assert reason(None) == "empty record: no value"
    assert reason(b"[1, 2]") == "not a JSON object: got list"
    assert reason(event(extra="x")) == "unknown field(s): extra"


def test_spark_struct_is_derived_from_the_declaration():
    ddl = event_struct_ddl()
    assert [part.split()[0] for part in ddl.split(", ")] == [f.name for f in FIELDS]
    assert "event_time BIGINT" in ddl


# value_pattern: what the API checks a view key against, outside validate()
def _field_accepts(field, value: str) -> bool:
    from definitions.events import _check_field
    from definitions.layer_settings import EventLimits

    limits = EventLimits(max_record_bytes=1_000_000)
    try:
        _check_field(field, value, limits)
    except InvalidEvent:
        return False
    return field.name != "url" or value.startswith("/")


@pytest.mark.parametrize("field", [f for f in FIELDS if f.kind == "string" and not f.choices], ids=lambda f: f.name)
def test_a_text_fields_pattern_accepts_exactly_the_values_the_contract_accepts(field):
    import re

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from definitions.events import value_pattern

    pattern = re.compile(value_pattern(field))
    alphabet = st.sampled_from(["/", "a", "Z", "é", "\U0001f600", "\x00", "\n", "\x1f", "\x7f", " ", "D", "E"])

    @settings(max_examples=400, deadline=None)
    @given(st.text(alphabet=alphabet, max_size=6))
    def agree(value):
        assert bool(pattern.fullmatch(value)) == _field_accepts(field, value), repr(value)

    agree()


@pytest.mark.parametrize("field", [f.name for f in FIELDS if f.kind == "int"])
def test_every_number_field_refuses_negative_values(field):
    """The readers refuse a negative stored cell as damage (stores.batch_reader.non_negative,
    stores.realtime): that holds while no number field of the contract can be negative."""
    with pytest.raises(InvalidEvent):
        validate(json.dumps(event(**{field: -1})).encode(), INGEST_MS)


@pytest.mark.parametrize("field", [f for f in FIELDS if f.kind == "int"], ids=lambda f: f.name)
def test_a_number_fields_pattern_takes_only_the_text_both_layers_key_it_by(field):
    """Both layers key a number by its decimal text: `?schema_version=01` (or `+1`, `1 `) named a key
    no event holds, and was answered all zeros, complete, instead of a 422."""
    import re

    from definitions.events import value_pattern

    pattern = re.compile(value_pattern(field))
    assert all(pattern.fullmatch(str(n)) for n in (0, 1, 2, 10, 123456789))
    assert not any(pattern.fullmatch(t) for t in ("01", "+1", "1 ", " 1", "-1", "", "1.0", "1e3", "٣"))
