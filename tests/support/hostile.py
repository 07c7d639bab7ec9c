"""A seeded corpus of hostile records for topic `events`: every one breaks the event contract.

Kinds: the confirmed record that killed both jobs (deep nesting, a lone surrogate, an event time
that overflows), truncated JSON, wrong types, huge numbers, invalid UTF-8, control characters,
giant strings, encodings that are not UTF-8, and a few that are only subtly wrong.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

from definitions.events import TICK_KEY

BASE = {
    "event_id": "e-0",
    "event_time": "2026-11-17T08:00:00.123Z",
    "user_id": "u-1",
    "url": "/hostile",
    "event_type": "page_view",
    "referrer": "https://example.com/",
    "country": "DE",
    "device": "mobile",
    "schema_version": 1,
}


def _event(rng: random.Random, **changes) -> dict:
    doc = dict(BASE, event_id=f"hostile-{rng.getrandbits(64):016x}")
    doc.update(changes)
    return doc


def _dump(doc) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _nested(rng: random.Random) -> bytes:
    depth = rng.choice([5, 50, 1_000, 2_000])
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    return (opener * depth + "1" + closer * depth).encode()


def _surrogate(rng: random.Random) -> bytes:
    field = rng.choice(["url", "user_id", "event_id", "referrer"])
    value = rng.choice(["/\\ud800", "/a\\udfff", "/\\udc00x"]) if field == "url" else "\\ud800"
    raw = _dump(_event(rng, **{field: "PLACEHOLDER"}))
    return raw.replace(b"PLACEHOLDER", value.encode())


def _control(rng: random.Random) -> bytes:
    field = rng.choice(["url", "user_id", "event_id", "referrer"])
    char = chr(rng.choice([0, 1, 7, 10, 13, 27, 31, 127]))
    value = ("/" if field == "url" else "") + "a" + char + "b"
    return _dump(_event(rng, **{field: value}))


def _absurd_time(rng: random.Random) -> bytes:
    when = rng.choice(
        [
            "0001-01-01T00:00:00+14:00",
            "9999-12-31T23:59:59-14:00",
            "0000-01-01T00:00:00Z",
            "2026-13-45T25:61:61Z",
            "1969-12-31T23:59:59Z",
            "1999-12-31T23:59:59Z",
            "2026-11-17T08:00:00.1234567890123Z",
            "٢٠٢٦-11-17T08:00:00Z",
            "2026-11-17T08:00:00+99:99",
        ]
    )
    return _dump(_event(rng, event_time=when))


def _wrong_type(rng: random.Random) -> bytes:
    field = rng.choice(list(BASE))
    value = rng.choice([1, 1.5, True, [], {}, ["x"], {"a": 1}, -1])
    if field == "schema_version":
        value = rng.choice(["1", 1.0, True, 3, -1, [1]])
    return _dump(_event(rng, **{field: value}))


def _huge_number(rng: random.Random) -> bytes:
    digits = rng.choice([20, 400, 4_000])
    text = rng.choice(["9" * digits, "-" + "9" * digits, "1e999999", "-1e999999", "NaN", "Infinity"])
    return _dump(_event(rng, schema_version="X")).replace(b'"X"', text.encode())


def _truncated(rng: random.Random) -> bytes:
    raw = _dump(_event(rng))
    return raw[: rng.randrange(0, len(raw) - 1)]


def _invalid_utf8(rng: random.Random) -> bytes:
    raw = _dump(_event(rng, url="/PLACEHOLDER"))
    bad = rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80"])
    return raw.replace(b"PLACEHOLDER", bad)


def _giant(rng: random.Random) -> bytes:
    size = rng.choice([3_000, 5_000, 20_000])
    field = rng.choice(["url", "referrer", "user_id", "event_id"])
    return _dump(_event(rng, **{field: "/" + "x" * size}))


def _encoding(rng: random.Random) -> bytes:
    text = json.dumps(_event(rng))
    return rng.choice([text.encode("utf-16"), text.encode("utf-32"), b"\xef\xbb\xbf" + text.encode()])


def _subtle(rng: random.Random) -> bytes:
    choice = rng.randrange(10)
    if choice == 0:
        return _dump(_event(rng, url="products/42"))
    if choice == 1:
        return _dump(_event(rng, event_type="PAGE_VIEW"))
    if choice == 2:
        return _dump(_event(rng, country="de"))
    if choice == 3:
        return _dump(_event(rng, extra_field=1))
    if choice == 4:
        return _dump({k: v for k, v in _event(rng).items() if k != "user_id"})
    if choice == 5:
        return _dump(_event(rng, event_id=""))
    if choice == 6:
        return rng.choice([b"", b"   ", b"null", b"[]", b"42", b'"text"'])
    if choice == 7:
        return _dump(_event(rng)) + b"garbage"
    if choice == 8:
        return _dump(_event(rng, channel="app"))  # a field of schema_version 2 in a version-1 event
    return b'{"event_id":"a","event_id":' + _dump(_event(rng))[1:]  # a duplicate key, then a truncated object


KINDS = {
    "nested": _nested,
    "surrogate": _surrogate,
    "control": _control,
    "absurd_time": _absurd_time,
    "wrong_type": _wrong_type,
    "huge_number": _huge_number,
    "truncated": _truncated,
    "invalid_utf8": _invalid_utf8,
    "giant": _giant,
    "encoding": _encoding,
    "subtle": _subtle,
}

# The records of the confirmed defects, exactly as reported.
CONFIRMED = {
    "nested_4000_bytes": ("[" * 2_000 + "]" * 2_000).encode(),
    "lone_surrogate_url": _dump(dict(BASE, event_id="confirmed-surrogate", url="PLACEHOLDER")).replace(
        b"PLACEHOLDER", b"/\\ud800"
    ),
    "year_one_plus_14": _dump(dict(BASE, event_id="confirmed-year-one", event_time="0001-01-01T00:00:00+14:00")),
    "event_900_kb": _dump(dict(BASE, event_id="confirmed-900kb", referrer="https://x/?" + "x" * 900_000)),
}


def corpus(seed: int, count: int) -> Iterator[tuple[str, bytes | None, bytes | None]]:
    """(kind, key, value) for `count` hostile records, the confirmed ones first."""
    rng = random.Random(seed)
    for name, value in CONFIRMED.items():
        yield name, b"u-hostile", value
    yield "tombstone", b"u-hostile", None
    yield "tick_key_with_payload", TICK_KEY, _dump(_event(rng, url="/not-a-tick", event_time="garbage"))
    names = sorted(KINDS)
    for _ in range(count - len(CONFIRMED) - 2):
        kind = rng.choice(names)
        yield kind, b"u-hostile", KINDS[kind](rng)
