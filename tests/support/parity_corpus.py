"""A seeded corpus for holding two validators of the event contract to each other: valid events in
every accepted shape, events one rule away from valid, and hostile bytes (the hostile corpus, random
byte edits of valid records, odd JSON that parsers disagree on). Each record comes with the Kafka
ingest time it is judged against."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

from definitions.events import CHANNELS, DEFAULT_LIMITS, FIELD_NAMES
from tests.support.hostile import BASE
from tests.support.hostile import corpus as hostile_corpus

# 2026-11-17, 2001-09-09, the floor, and a producer-set timestamp in year 9999 (where event times
# have more microseconds than a double holds exactly)
INGEST_MS = (1_795_420_800_000, 1_000_000_000_000, 946_684_800_000, 253_402_300_799_000)

_ODD_TEXT = [
    "",
    " ",
    "/",
    "é",
    "/ü/日本",
    "😀",
    "/\U0001f600x",
    "a\u2028b",
    "\ufeff",
    "\u00a0",
    "/\x7f",
    "/a\x00b",
    "\t",
    "/\\",
    '/"',
    "'",
    "x" * 64,
    "x" * 65,
    "/" + "y" * 2047,
    "/" + "y" * 2048,
    "/" + "é" * 2047,
    "/" + "😀" * 2047,
    "page_view",
    "PAGE_VIEW",
    "DE",
    "de",
    "D",
    "DEU",
    "desktop",
    "DE\u2028",
    "DE\u0085",
    "desktop\u2029",
    "2026-11-17T08:00:00.123456789012345678901234567890Z",
    "/" + "😀" * 45,
    "q" * 39 + "😀\ud800",
]
_ODD_NAMES = [
    "extra",
    "Event_ID",
    "event_id\u0000",
    "ünknown",
    "😀",
    "\ud800",
    "k" * 45,
    "é" * 45,
    "😀" * 41,
    "\n\"'" * 20,
]
_ESCAPES = ["\\ud800", "\\udfff", "\\ud83d\\ude00", "\\ude00\\ud83d", "\\u0000", "\\u001f", "\\u007f", "\\/", "\\n"]
_TIMES = [
    "2026-11-17T08:00:00Z",
    "2026-11-17T08:00:00.1Z",
    "2026-11-17T08:00:00.123456789Z",
    "2026-11-17T08:00:00.001Z",
    "2026-11-17T08:00:00.999999999Z",
    "2026-11-17T08:00:00+05:30",
    "2026-11-17T08:00:00-0530",
    "2026-11-17T08:00:00+05:75",
    "2026-11-17T08:00:00+23:59",
    "2026-11-17T08:00:00+24:00",
    "2026-11-17T08:00:00-00:00",
    "2026-11-17T24:00:00Z",
    "2026-11-17T23:59:60Z",
    "2026-02-29T00:00:00Z",
    "2024-02-29T00:00:00Z",
    "0000-01-01T00:00:00Z",
    "0001-01-01T00:00:00+00:01",
    "0001-01-01T00:00:00-00:01",
    "9999-12-31T23:59:59-00:01",
    "9999-12-31T23:59:59+00:01",
    "1999-12-31T23:59:59.999Z",
    "2000-01-01T00:00:00Z",
    "2000-01-01T00:00:00.000001Z",
    "2026-11-17T08:00:00z",
    "2026-11-17 08:00:00Z",
    "2026-11-17T08:00Z",
    "2026-11-17T08:00:00",
    "2026-11-17T08:00:00.Z",
    "2026-11-17T08:00:00+5:30",
    "+2026-11-17T08:00:00Z",
    "2026-11-17T08:00:00Z\u2028",
    "2026-11-17T08:00:00+05:00\u2029",
    "2026-11-17T08:00:00.123-0130\u0085",
    "6091-04-04T06:09:25.318994Z",
    "9534-02-19T04:16:54.973977Z",
    "3664-08-23T21:23:40.991995Z",
]


def _time_near(rng: random.Random, ingest_ms: int) -> str:
    """A time close to a boundary the contract judges: the floor or ingest time + max_future_s."""
    edge = rng.choice([ingest_ms + DEFAULT_LIMITS.max_future_s * 1000, DEFAULT_LIMITS.min_event_time_s * 1000])
    ms = min(edge + rng.choice([-1000, -1, 0, 1, 1000]), 253_402_300_799_000)  # at most 9999-12-31T23:59:59Z
    whole, frac = divmod(ms, 1000)
    from datetime import UTC, datetime

    text = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    digits = rng.choice([f"{frac:03d}", f"{frac:03d}999", f"{frac:03d}0001", ""]) if frac or rng.random() < 0.5 else ""
    return text + (f".{digits}" if digits else "") + rng.choice(["Z", "+00:00", "-0000"])


def _random_time(rng: random.Random) -> str:
    parts = [
        f"{rng.choice([rng.randrange(10000), 2026, 1970, 1]):04d}",
        f"{rng.randrange(14):02d}",
        f"{rng.randrange(33):02d}",
        f"{rng.randrange(26):02d}",
        f"{rng.randrange(62):02d}",
        f"{rng.randrange(62):02d}",
    ]
    text = f"{parts[0]}-{parts[1]}-{parts[2]}T{parts[3]}:{parts[4]}:{parts[5]}"
    if rng.random() < 0.5:
        text += "." + "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 11)))
    zone = rng.choice(
        ["Z", f"+{rng.randrange(30):02d}:{rng.randrange(100):02d}", f"-{rng.randrange(30):02d}{rng.randrange(100):02d}"]
    )
    return text + zone


def _valid(rng: random.Random, ingest_ms: int) -> dict:
    doc = dict(BASE, event_id=f"p-{rng.getrandbits(48):012x}", url=rng.choice(["/a", "/ü/日本", "/😀", "/x?y=1"]))
    if rng.random() < 0.5:  # a version-2 event, usually with the field version 2 added
        doc.update(schema_version=2, channel=rng.choice(CHANNELS))
    for name in ("referrer", "country", "device", "schema_version", "channel"):
        if name not in doc:
            continue
        roll = rng.random()
        if roll < 0.2:
            del doc[name]
        elif roll < 0.3:
            doc[name] = None
        elif roll < 0.35 and name != "schema_version":
            doc[name] = ""
    doc["event_time"] = _time_near(rng, ingest_ms) if rng.random() < 0.3 else rng.choice(_TIMES[:11])
    return doc


def _dump(doc, rng: random.Random) -> bytes:
    text = json.dumps(doc, ensure_ascii=rng.random() < 0.5, separators=rng.choice([(",", ":"), (", ", ": ")]))
    return text.encode("utf-8", "surrogatepass")


def _field_edit(rng: random.Random, ingest_ms: int) -> bytes:
    doc = _valid(rng, ingest_ms)
    field = rng.choice([*FIELD_NAMES, *_ODD_NAMES])
    roll = rng.random()
    if roll < 0.35:
        doc[field] = rng.choice(_ODD_TEXT)
    elif roll < 0.5:
        doc[field] = rng.choice([0, 1, -1, 2, 3, 1.0, -0.0, True, False, None, [], {}, [1], {"a": "b"}, 10**30])
    elif roll < 0.65:
        doc["event_time"] = _random_time(rng) if rng.random() < 0.6 else rng.choice(_TIMES)
    elif roll < 0.75:
        doc.pop(field, None)
    else:
        doc[field] = "PLACEHOLDER"
        raw = _dump(doc, rng)
        escape = "".join(rng.choice(_ESCAPES) for _ in range(rng.randrange(1, 3)))
        prefix = "/" if field == "url" and rng.random() < 0.7 else ""
        return raw.replace(b"PLACEHOLDER", (prefix + escape).encode())
    return _dump(doc, rng)


def _json_oddity(rng: random.Random, ingest_ms: int) -> bytes:
    raw = _dump(_valid(rng, ingest_ms), rng)
    inner = raw[1:-1]
    return rng.choice(
        [
            b'{"event_id":"dup",' + inner + b"}",
            b"{" + inner + b',"event_id":"last"}',
            b'{"\\u0065vent_id":"escaped",' + inner + b"}",
            b"{" + inner + b',"zz":1,"zz":2}',
            b"{" + inner + b',"event_id":"last"} x',
            b"{" + inner + b',"event_id":"last","extra":tru}',
            b"{" + inner + b',"event_id":"last","event_id":"third"}',
            b"{" + inner + b',"extra":{"a":1,"a":2}}',
            b"[" + b"{" + inner + b',"event_id":"last"}]',
            b'{"url":{"a":1,"a":2},' + inner + b"}",
            b"{" + inner + b',"schema_version":NaN}',
            b"{" + inner + b',"extra":Infinity}',
            b"{" + inner + b',"extra":-Infinity}',
            b"{" + inner + b',"extra":' + b"9" * rng.choice([4300, 4301, 5000]) + b"}",
            b"{" + inner + b',"extra":-' + b"9" * rng.choice([4300, 4301]) + b"}",
            b"{" + inner + b',"extra":[' + b"1" * 4301 + b"]}",
            b"{" + inner + b',"extra":1.' + b"5" * 5000 + b"}",
            b"{" + inner + b',"extra":1e999999}',
            b"{" + inner + b',"schema_version":-0}',
            b"{" + inner + b',"schema_version":01}',
            b"{" + inner + b',"schema_version":1.}',
            b"{" + inner + b',"schema_version":+1}',
            b"{" + inner + b',"schema_version":0x1}',
            b"{" + inner + b',"schema_version":"2"}',
            b"{" + inner + b',"schema_version":""}',
            b"{" + inner + b',"schema_version":2.0}',
            b"{" + inner + b',"schema_version":1e0}',
            b"{" + inner + b',"schema_version":true}',
            b"{" + inner + b',"schema_version":null}',
            b"{" + inner + b',"schema_version":-' + b"1" + b"0" * 30 + b"}",
            b"{" + inner + b',"schema_version":' + b"9" * 4301 + b"}",
            b"{" + inner + b",}",
            b"{" + inner + b"}}",
            b"{" + inner + b"} ",
            b"{" + inner + b"}\x0b",
            b" \t\r\n{" + inner + b"}\n",
            b"\x0c{" + inner + b"}",
            b"{" + inner + b"}\x00",
            b"{" + inner + b"} {}",
            b"{" + inner + b"} 1",
            b"\xef\xbb\xbf{" + inner + b"}",
            b"{" + inner.replace(b'"', b"'", 2) + b"}",
            b"{" + inner + b',"extra":"a\tb"}',
            b"{" + inner + b',"extra":"\\x41"}',
            b"{" + inner + b',"extra":"\\u12"}',
            b"{" + inner + b',"extra":/*c*/1}',
            b"{" + inner + b",extra:1}",
            b"{" + inner + b',"extra":tru}',
            b"{" + inner + b',"extra":[1,[2,[3]]]}',
            b"{" + inner + b',"extra":{"a":{"b":{"c":1}}}}',
            b'{"a":[[[' + b"]]]}",
            b'"\\ud800"',
            b"1e5",
            b"-0",
            b"true",
            b"null",
            b"[" + raw + b"]",
            raw.replace(b":", b" : "),
            raw + b"\n\n",
        ]
    )


def _byte_edit(rng: random.Random, ingest_ms: int) -> bytes:
    data = bytearray(_dump(_valid(rng, ingest_ms), rng))
    for _ in range(rng.randrange(1, 4)):
        pos = rng.randrange(len(data))
        roll = rng.random()
        if roll < 0.4:
            data[pos] = rng.randrange(256)
        elif roll < 0.7:
            data.insert(pos, rng.choice(b'{}[]",:\\ \x00\x80\xc3\xed\xf0tnfe0-.'))
        else:
            del data[pos : pos + rng.randrange(1, 4)]
    return bytes(data)


def records(seed: int, count: int) -> Iterator[tuple[bytes | None, int]]:
    """(value, ingest time in ms) for `count` records: about a fifth valid, the rest hostile."""
    rng = random.Random(seed)
    for _, _, value in hostile_corpus(seed, max(count // 10, 10)):
        if value is None or len(value) <= 1_000_000:
            yield value, rng.choice(INGEST_MS)
    makers = [_field_edit, _json_oddity, _byte_edit]
    for _ in range(count - max(count // 10, 10)):
        ingest_ms = rng.choice(INGEST_MS)
        roll = rng.random()
        if roll < 0.2:
            yield _dump(_valid(rng, ingest_ms), rng), ingest_ms
        else:
            yield rng.choice(makers)(rng, ingest_ms), ingest_ms
