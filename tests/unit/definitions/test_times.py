"""Reading a moment a person wrote (definitions/times.py): ISO 8601 in, epoch ms out, or a clear
error naming what was given."""

from __future__ import annotations

import pytest

from definitions.times import iso_ms, parse_iso_ms


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("2026-11-27T02:00:00Z", 1_795_744_800_000),
        ("2026-11-27T02:00:00", 1_795_744_800_000),  # no zone: UTC
        ("2026-11-27T03:00:00+01:00", 1_795_744_800_000),
        ("2026-11-27T02:00:00.250Z", 1_795_744_800_250),
        ("2026-11-27", 1_795_737_600_000),
        ("1970-01-01T00:00:00Z", 0),
        ("1970-01-13T04:31:39.096Z", 1_053_099_096),  # through a float it came out 1 ms early
        ("9999-12-31T23:59:59.999Z", 253_402_300_799_999),
    ],
)
def test_an_iso_time_becomes_epoch_ms(text, ms):
    assert parse_iso_ms(text) == ms
    assert parse_iso_ms(iso_ms(ms)) == ms // 1000 * 1000


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("yesterday", "not an ISO 8601 time"),
        ("", "not an ISO 8601 time"),
        ("2026-13-01", "not an ISO 8601 time"),
        ("2026-11-27T25:00:00Z", "not an ISO 8601 time"),
        ("2026-11-27T02:00:00+99:00", "not an ISO 8601 time"),
        ("1969-12-31T23:59:59Z", "before 1970"),
        ("0001-01-01T00:00:00Z", "before 1970"),
        ("x" * 10_000, "not an ISO 8601 time"),
        # in the year 10000 in UTC: taken, then every message naming it failed (exit 1, "is the stack up?")
        ("9999-12-31T23:30:00-01:00", "after 9999"),
        ("0001-01-01T00:30:00+01:00", "before 1970"),  # before year 1 in UTC
    ],
)
def test_anything_else_is_a_value_error_naming_what_and_the_text(text, words):
    with pytest.raises(ValueError, match=words) as caught:
        parse_iso_ms(text, "--cutoff")
    message = str(caught.value)
    assert message.startswith("--cutoff: ") and len(message) < 200
