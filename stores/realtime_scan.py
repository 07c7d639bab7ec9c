"""Full scans of a Cassandra table, token range by token range, that survive an unreadable part.

A read that meets more tombstones than the cluster's `tombstone_failure_threshold` fails (and one
on an overloaded node may time out). A single query over a whole table would then fail as a whole;
`scan` instead reads the token ring in ranges, splits a range that fails into halves until the
unreadable part is small (a few partitions at most), and records what it could not read in
`unreadable`, so a caller can say exactly what it skipped.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# Murmur3Partitioner tokens lie in (MIN_TOKEN, MAX_TOKEN].
MIN_TOKEN = -(2**63)
MAX_TOKEN = 2**63 - 1
SPLITS = 64
MIN_WIDTH = 2**44  # a failing range narrower than this (2^-20 of the ring) is reported, not split
MAX_FAILURES = 400  # failed reads in one scan before giving up: the table, not a partition, is the problem


@dataclass(frozen=True)
class Unreadable:
    """A token range (start, end] of `table` whose rows could not be read."""

    table: str
    start: int
    end: int
    error: str

    def describe(self) -> str:
        return f"{self.table} token range ({self.start}, {self.end}]: {self.error}"


class ScanError(RuntimeError):
    pass


def token_ranges(splits: int = SPLITS) -> list[tuple[int, int]]:
    """`splits` contiguous ranges (start, end] covering the whole ring, in token order."""
    width = (MAX_TOKEN - MIN_TOKEN) // splits
    bounds = [MIN_TOKEN + i * width for i in range(splits)] + [MAX_TOKEN]
    return list(zip(bounds[:-1], bounds[1:]))


def scan(
    session,
    table: str,
    partition_key: Sequence[str],
    columns: str,
    where: str = "",
    params: Sequence = (),
    unreadable: list[Unreadable] | None = None,
    splits: int = SPLITS,
    fetch_size: int = 5_000,
) -> Iterator[list]:
    """Yield the rows of `table` (`columns`, filtered by `where` with `params`) one token range at a
    time: each list is a whole range, read completely. Ranges that cannot be read are appended to
    `unreadable`; errors other than a failed or timed-out read (store down, bad query) raise."""
    pk = ", ".join(partition_key)
    cql = f"SELECT {columns} FROM {table} WHERE token({pk}) > ? AND token({pk}) <= ?"
    if where:
        cql += f" AND {where} ALLOW FILTERING"
    statement = session.prepare(cql)
    statement.fetch_size = fetch_size
    pending = list(reversed(token_ranges(splits)))
    warnings = _TombstoneWarnings()
    driver_log = logging.getLogger("cassandra.protocol")
    driver_log.addFilter(warnings)
    try:
        yield from _ranges(session, statement, table, params, pending, unreadable)
    finally:
        driver_log.removeFilter(warnings)
        if warnings.count:
            log.info("%d reads of %s met more tombstones than tombstone_warn_threshold", warnings.count, table)


def _ranges(session, statement, table, params, pending, unreadable) -> Iterator[list]:
    from cassandra import ReadFailure, ReadTimeout

    failures = 0
    while pending:
        start, end = pending.pop()
        try:
            rows = list(session.execute(statement, (start, end, *params)))
        except (ReadFailure, ReadTimeout) as exc:
            failures += 1
            if failures > MAX_FAILURES:
                raise ScanError(f"{table}: {failures} token-range reads failed; last: {exc}") from exc
            if end - start > MIN_WIDTH:
                middle = start + (end - start) // 2
                pending.extend(((middle, end), (start, middle)))
                continue
            gap = Unreadable(table, start, end, _short(exc))
            log.warning("could not read %s (%s)", gap.describe(), exc)
            if unreadable is not None:
                unreadable.append(gap)
            continue
        yield rows


class _TombstoneWarnings(logging.Filter):
    """Counts the driver's per-query "tombstone_warn_threshold" server warnings instead of logging
    each: a scan after deletions meets many, and says so once."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "tombstone_warn_threshold" in record.getMessage():
            self.count += 1
            return False
        return True


# Cassandra's read failure reason codes (native protocol v5, section 9).
_FAILURE_CODES = {
    0x0000: "UNKNOWN",
    0x0001: "READ_TOO_MANY_TOMBSTONES",
    0x0002: "INDEX_NOT_AVAILABLE",
    0x0003: "CDC_SPACE_FULL",
    0x0004: "COUNTER_WRITE",
    0x0005: "TABLE_NOT_FOUND",
    0x0006: "KEYSPACE_NOT_FOUND",
}


def _short(exc: Exception) -> str:
    """The failure as reports show it: its kind and reason, never the driver's message, which names
    replicas by address (reports are readable without a token). The log keeps the whole text."""
    text = str(exc)
    reasons = set()
    for code in (getattr(exc, "error_code_map", None) or {}).values():
        with contextlib.suppress(TypeError, ValueError):
            code = int(code, 0) if isinstance(code, str) else int(code)
        reasons.add(_FAILURE_CODES.get(code, "UNKNOWN") if isinstance(code, int) else "UNKNOWN")
    for reason in ("READ_TOO_MANY_TOMBSTONES", "Operation timed out"):
        if reason in text:
            reasons.add(reason)
    named = ", ".join(sorted(reasons)) or "a replica failed the read"
    return f"{type(exc).__name__}: {named}"


def rows_ingested_between(
    settings, start_ms: int, end_ms: int | None, unreadable: list[Unreadable] | None = None
) -> Iterator[tuple[str, Any]]:
    """(table, row) for every row of both realtime tables whose ingest bucket is in
    [start_ms, end_ms) (no upper bound when `end_ms` is None): a filtered scan, token range by
    token range; what cannot be read is appended to `unreadable`. Rows carry every column of their
    table's declaration (stores.realtime_schema.TABLES)."""
    from stores.clients import cassandra_cluster
    from stores.realtime_schema import TABLES

    bounds = "ingest_bucket >= ?" + (" AND ingest_bucket < ?" if end_ms is not None else "")
    params = (start_ms // 1000,) + ((end_ms // 1000,) if end_ms is not None else ())
    cluster = cassandra_cluster(settings, timeout_s=120)
    try:
        session = cluster.connect(settings.cassandra.keyspace)
        for spec in TABLES.values():
            columns = ", ".join(spec.column_names)
            for rows in scan(session, spec.name, spec.partition_key, columns, bounds, params, unreadable=unreadable):
                for row in rows:
                    yield spec.name, row
    finally:
        cluster.shutdown()
