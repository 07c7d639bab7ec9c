"""The realtime tables' TTL over time, recorded in each table's comment.

Cassandra gives a row its table's `default_time_to_live` when the row is written; changing the
TTL later leaves rows already written with the old one. So the time of every change is part of
what an answer's staleness depends on (serving_layer.staleness): rows written before a raise
expire on the old TTL. `ensure_schema` (stores.realtime_schema) changes the TTL and the comment in one
ALTER TABLE, so the record is there exactly when the change is: a JSON list of [from ms, TTL s],
rows written from that time on (until the next entry) carrying that TTL.

The recorded times lean to the safe side: a raise counts from `CHANGE_MARGIN_MS` after it (rows
written meanwhile may still carry the old TTL: mutations in flight, nodes yet to learn the new
schema), a lowering from that long before it. A comment that is no record, or a table whose TTL
differs from its record's last entry (changed by hand), is read so that no row is thought to
live longer than it may.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

TtlChange = tuple[int, int]  # (rows written from this time on, ms; carry this TTL, s)
CHANGE_MARGIN_MS = 300_000
MAX_CHANGES = 32  # older changes fold into the first kept one (the shortest TTL of them)
MAX_COMMENT_CHARS = 4_096
FOREVER_S = 2**31 - 1  # a TTL of 0 is none: such rows never expire
LATEST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: a later change time is no record


def lifetime(ttl_s: int) -> int:
    """How long a row with table TTL `ttl_s` lives (0: for ever)."""
    return ttl_s if ttl_s > 0 else FOREVER_S


def parse_changes(comment: str | None) -> tuple[TtlChange, ...]:
    """The changes a table's comment records, oldest first; () for a comment that is none."""
    if not comment or len(comment) > MAX_COMMENT_CHARS:
        return ()
    try:
        record = json.loads(comment)
    except ValueError:
        return ()
    if not isinstance(record, dict) or not isinstance(record.get("ttl_changes"), list):
        return ()
    changes = []
    for entry in record["ttl_changes"]:
        if (
            not isinstance(entry, list)
            or len(entry) != 2
            or not all(type(n) is int and n >= 0 for n in entry)  # no bool, no float
            or entry[0] > LATEST_MS
            or entry[1] > FOREVER_S
        ):
            return ()
        changes.append((entry[0], lifetime(entry[1])))
    return tuple(sorted(changes))


def record_change(changes: Sequence[TtlChange], old_ttl_s: int, new_ttl_s: int, now_ms: int) -> str:
    """The comment recording a change of a table's TTL from `old_ttl_s` (its record `changes`) to
    `new_ttl_s` at `now_ms`. A lowering supersedes every entry from its own (earlier) time on."""
    old_ttl_s, new_ttl_s = lifetime(old_ttl_s), lifetime(new_ttl_s)
    kept = list(effective_changes(old_ttl_s, changes))
    at = now_ms + CHANGE_MARGIN_MS if new_ttl_s > old_ttl_s else max(now_ms - CHANGE_MARGIN_MS, 0)
    kept = [(since, ttl) for since, ttl in kept if since < at] or [(0, old_ttl_s)]
    kept.append((at, new_ttl_s))
    if len(kept) > MAX_CHANGES:
        folded = kept[: len(kept) - MAX_CHANGES + 1]
        kept = [(0, min(ttl for _, ttl in folded))] + kept[len(folded) :]
    return json.dumps({"ttl_changes": [list(change) for change in kept]}, separators=(",", ":"))


def effective_changes(current_ttl_s: int, changes: Sequence[TtlChange]) -> tuple[TtlChange, ...]:
    """The TTLs a table's rows may carry: its record; with no record, the current TTL for every
    row. A table whose TTL is not its record's last (changed by hand, at a time nobody recorded):
    each entry no longer than the current TTL (a lowering may have reached any of them), and a raise
    taken as reaching none."""
    current_ttl_s = lifetime(current_ttl_s)
    if not changes:
        return ((0, current_ttl_s),)
    ordered = sorted(changes)
    if ordered[-1][1] == current_ttl_s:
        return tuple(ordered)
    return tuple((since, min(ttl, current_ttl_s)) for since, ttl in ordered)


def combined(tables: Iterable[tuple[int, Sequence[TtlChange]]]) -> tuple[TtlChange, ...]:
    """One record for rows that may be in any of `tables` ((current TTL, record) each): at every
    time, the shortest TTL any of them gives rows written then."""
    records = [effective_changes(current, changes) for current, changes in tables]
    if not records:
        return ()
    times = sorted({since for record in records for since, _ in record} | {0})
    return tuple((at, min(ttl_at(record, at) for record in records)) for at in times)


def ttl_at(record: Sequence[TtlChange], at_ms: int) -> int:
    """The TTL of a row written at `at_ms` by `record` (its first entry's before any)."""
    ttl = record[0][1]
    for since, value in record:
        if since > at_ms:
            break
        ttl = value
    return ttl


def earliest_expiry(record: Sequence[TtlChange], oldest_ms: int) -> tuple[float, int, int]:
    """(when, s; the TTL it expires on; when it was written, ms) of the first row written at or
    after `oldest_ms` that may expire. The first entry holds for rows written before it too."""
    best: tuple[float, int, int] | None = None
    for i, (since, ttl) in enumerate(record):
        until = record[i + 1][0] if i + 1 < len(record) else None
        if until is not None and until <= oldest_ms:
            continue
        written_ms = oldest_ms if i == 0 else max(since, oldest_ms)
        expiry = written_ms / 1000 + ttl
        if best is None or expiry < best[0]:
            best = (expiry, ttl, written_ms)
    assert best is not None, "a record has at least one entry"
    return best


def alive_from_ms(record: Sequence[TtlChange], at_ms: int) -> int:
    """The earliest write time from which every row written then or later is still there at `at_ms`
    by `record` (a row written at w with TTL t is gone from w + t on)."""
    floor = 0
    for i, (since, ttl) in enumerate(record):
        start = 0 if i == 0 else since
        until = record[i + 1][0] if i + 1 < len(record) else None
        gone_until = at_ms - ttl * 1000  # rows of this entry written at or before it are gone
        if until is not None and gone_until >= until:
            floor = max(floor, until)
        elif gone_until >= start:
            floor = max(floor, gone_until + 1)
    return floor
