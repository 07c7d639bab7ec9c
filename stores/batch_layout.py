"""How batch views are laid out in HBase. The batch job writes this layout; the serving layer reads it.

Table per view and version: `<namespace>:<view>_v<N>`, one column family `d`.

- `by_key` views — row key = key parts (each length-prefixed) + granularity code + bucket start
  (8-byte big-endian epoch seconds), so a key's series over a time range is one range scan.
  Columns: `d:v` the value (8-byte big-endian), and for distinct views `d:s` the HLL sketch.
- `by_bucket` views — row key = granularity code + bucket start; one column per key,
  `d:<encoded key>` = value, so everything about one bucket (the top N of it) is one row.

The meta table (`<namespace>:meta`, family `p`) holds the pointer row that serving follows, one
row per batch run, and the version counter.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from definitions.views import View

FAMILY = b"d"
VALUE = b"d:v"
SKETCH = b"d:s"
GRANULARITY_CODE = {"minute": b"m", "hour": b"h", "day": b"d"}

META_FAMILY = b"p"
POINTER_ROW = b"pointer"
COUNTER_ROW = b"counters"
VERSION_COUNTER = b"p:version"


def table_name(view: View | str, version: int) -> str:
    """The table of a view's version, relative to the platform's namespace."""
    name = view if isinstance(view, str) else view.name
    return f"{name}_v{version}"


def run_row(version: int) -> bytes:
    return f"run:{version:010d}".encode()


def encode_int(value: int) -> bytes:
    return struct.pack(">q", int(value))


def decode_int(data: bytes) -> int:
    return struct.unpack(">q", data)[0]


def encode_key(parts: Sequence[object]) -> bytes:
    """Key parts, each as a 2-byte length and its UTF-8 bytes: a prefix of the row key, no escaping."""
    out = bytearray()
    for part in parts:
        raw = str(part).encode()
        if len(raw) > 0xFFFF:
            raise ValueError("key part longer than 65535 bytes")
        out += struct.pack(">H", len(raw)) + raw
    return bytes(out)


def decode_key(data: bytes) -> tuple[str, ...]:
    parts, i = [], 0
    while i < len(data):
        (length,) = struct.unpack_from(">H", data, i)
        if i + 2 + length > len(data):
            raise ValueError(f"a key part of {length} bytes runs past the key's {len(data)}")
        parts.append(data[i + 2 : i + 2 + length].decode())
        i += 2 + length
    return tuple(parts)


def bucket_suffix(granularity: str, bucket: int) -> bytes:
    return GRANULARITY_CODE[granularity] + struct.pack(">Q", int(bucket))


def row_key(view: View, granularity: str, keys: Sequence[object], bucket: int) -> bytes:
    if view.layout == "by_bucket":
        return bucket_suffix(granularity, bucket)
    return encode_key(keys) + bucket_suffix(granularity, bucket)


def column(view: View, keys: Sequence[object]) -> bytes:
    """The column holding the value: `d:v`, or for by_bucket views the key's own column."""
    if view.layout == "by_bucket":
        return FAMILY + b":" + encode_key(keys)
    return VALUE


def scan_range(view: View, granularity: str, keys: Sequence[object], start: int, end: int) -> tuple[bytes, bytes]:
    """Row range [start row, stop row) covering buckets start <= b < end."""
    prefix = b"" if view.layout == "by_bucket" else encode_key(keys)
    return prefix + bucket_suffix(granularity, start), prefix + bucket_suffix(granularity, end)


def parse_row_key(view: View, row: bytes) -> tuple[tuple[str, ...], str, int]:
    """(key parts, granularity, bucket) of a row; by_bucket rows have no key parts."""
    code, (bucket,) = row[-9:-8], struct.unpack(">Q", row[-8:])
    granularity = next(g for g, c in GRANULARITY_CODE.items() if c == code)
    keys = () if view.layout == "by_bucket" else decode_key(row[:-9])
    return keys, granularity, bucket
