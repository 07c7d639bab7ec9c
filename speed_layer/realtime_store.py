"""The realtime views in Cassandra: schema, idempotent upserts, and reads for the merge.

Two tables serve every declared view (definitions/views.py):

- `realtime_by_key`: PRIMARY KEY ((view_name, granularity, key), event_bucket, ingest_bucket) — a
  view key's series; the merge reads, per event bucket, only ingest buckets >= the batch cutoff.
- `realtime_by_bucket`: PRIMARY KEY ((view_name, granularity, event_bucket), ingest_bucket, key) —
  every key of an event bucket together, for top-N queries of `by_bucket` views.

Rows hold absolute values for their (key, event bucket, ingest bucket): a replayed micro-batch
writes the same values again. Every row carries the table's TTL (settings.speed.ttl_s).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from definitions.clients import cassandra_cluster
from definitions.settings import Settings

log = logging.getLogger(__name__)

BY_KEY = "realtime_by_key"
BY_BUCKET = "realtime_by_bucket"


def schema(settings: Settings) -> list[str]:
    ks, ttl = settings.cassandra.keyspace, settings.speed.ttl_s
    return [
        f"""CREATE TABLE IF NOT EXISTS {ks}.{BY_KEY} (
            view_name text, granularity text, key text, event_bucket bigint, ingest_bucket bigint,
            value bigint, sketch blob, updated_ms bigint,
            PRIMARY KEY ((view_name, granularity, key), event_bucket, ingest_bucket)
        ) WITH default_time_to_live = {ttl}""",
        f"""CREATE TABLE IF NOT EXISTS {ks}.{BY_BUCKET} (
            view_name text, granularity text, event_bucket bigint, ingest_bucket bigint, key text,
            value bigint, updated_ms bigint,
            PRIMARY KEY ((view_name, granularity, event_bucket), ingest_bucket, key)
        ) WITH default_time_to_live = {ttl}""",
    ]


def ensure_schema(settings: Settings, session=None) -> None:
    """Create the realtime tables; bring their TTL in line with settings."""
    own = session is None
    cluster = cassandra_cluster(settings) if own else None
    session = session or cluster.connect()
    try:
        for statement in schema(settings):
            session.execute(statement)
        ks = settings.cassandra.keyspace
        for table in (BY_KEY, BY_BUCKET):
            row = session.execute(
                "SELECT default_time_to_live FROM system_schema.tables WHERE keyspace_name = %s AND table_name = %s",
                (ks, table)).one()
            if row is not None and row.default_time_to_live != settings.speed.ttl_s:
                session.execute(f"ALTER TABLE {ks}.{table} WITH default_time_to_live = {settings.speed.ttl_s}")
    finally:
        if own:
            cluster.shutdown()


@dataclass(frozen=True)
class RealtimeRow:
    view: str
    granularity: str
    key: str
    event_bucket: int
    ingest_bucket: int
    value: int
    sketch: bytes | None = None


class RealtimeWriter:
    """Upserts realtime rows with prepared statements, many in flight at once."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.cluster = cassandra_cluster(settings, timeout_s=30)
        self.session = self.cluster.connect(settings.cassandra.keyspace)
        ensure_schema(settings, self.session)
        self.by_key = self.session.prepare(
            f"INSERT INTO {BY_KEY} (view_name, granularity, key, event_bucket, ingest_bucket, value, sketch, updated_ms) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        self.by_bucket = self.session.prepare(
            f"INSERT INTO {BY_BUCKET} (view_name, granularity, event_bucket, ingest_bucket, key, value, updated_ms) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)")

    def write(self, by_key: Sequence[RealtimeRow], by_bucket: Sequence[RealtimeRow], attempts: int = 5) -> None:
        from cassandra.concurrent import execute_concurrent_with_args

        now = int(time.time() * 1000)
        work = [
            (self.by_key, [(r.view, r.granularity, r.key, r.event_bucket, r.ingest_bucket, r.value, r.sketch, now) for r in by_key]),
            (self.by_bucket, [(r.view, r.granularity, r.event_bucket, r.ingest_bucket, r.key, r.value, now) for r in by_bucket]),
        ]
        for statement, params in work:
            pending = params
            for attempt in range(1, attempts + 1):
                if not pending:
                    break
                results = execute_concurrent_with_args(self.session, statement, pending,
                                                       concurrency=self.settings.speed.write_concurrency,
                                                       raise_on_first_error=False)
                failed = [p for p, (ok, _) in zip(pending, results) if not ok]
                if failed:
                    log.warning("%d realtime writes failed (attempt %d/%d); retrying", len(failed), attempt, attempts)
                    time.sleep(min(2 ** attempt, 10))
                pending = failed
            if pending:
                raise RuntimeError(f"{len(pending)} realtime writes still failing after {attempts} attempts")

    def close(self) -> None:
        self.cluster.shutdown()


def chunks(items: Sequence, size: int) -> Iterable[Sequence]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


@dataclass
class RealtimeCell:
    """The speed part of one event bucket: the values summed over the ingest buckets read."""

    value: int = 0
    sketches: list[bytes] | None = None
    ingest_buckets: int = 0


class RealtimeReader:
    """Reads realtime rows for the merge: only ingest buckets at or after a cutoff are ever read."""

    IN_CHUNK = 100

    def __init__(self, settings: Settings, session=None) -> None:
        self.settings = settings
        self.cluster = None
        if session is None:
            self.cluster = cassandra_cluster(settings)
            session = self.cluster.connect(settings.cassandra.keyspace)
        self.session = session
        self.series_stmt = session.prepare(
            f"SELECT event_bucket, ingest_bucket, value, sketch FROM {BY_KEY} "
            "WHERE view_name = ? AND granularity = ? AND key = ? AND event_bucket IN ? AND ingest_bucket >= ?")
        self.bucket_stmt = session.prepare(
            f"SELECT key, value FROM {BY_BUCKET} WHERE view_name = ? AND granularity = ? AND event_bucket = ? "
            "AND ingest_bucket >= ?")

    def series(self, view: str, granularity: str, key: str, buckets: Sequence[int], min_ingest_bucket: int,
               with_sketches: bool = False) -> dict[int, RealtimeCell]:
        from cassandra.concurrent import execute_concurrent_with_args

        params = [(view, granularity, key, list(chunk), min_ingest_bucket) for chunk in chunks(list(buckets), self.IN_CHUNK)]
        out: dict[int, RealtimeCell] = {}
        for ok, result in execute_concurrent_with_args(self.session, self.series_stmt, params, concurrency=16,
                                                        raise_on_first_error=True):
            for row in result:
                cell = out.setdefault(row.event_bucket, RealtimeCell(sketches=[] if with_sketches else None))
                cell.value += row.value
                cell.ingest_buckets += 1
                if with_sketches and row.sketch is not None:
                    cell.sketches.append(bytes(row.sketch))
        return out

    def bucket(self, view: str, granularity: str, buckets: Sequence[int], min_ingest_bucket: int) -> dict[int, dict[str, int]]:
        """{event bucket: {key: value summed over ingest buckets >= min}} for a by_bucket view."""
        from cassandra.concurrent import execute_concurrent_with_args

        params = [(view, granularity, b, min_ingest_bucket) for b in buckets]
        out: dict[int, dict[str, int]] = {}
        results = execute_concurrent_with_args(self.session, self.bucket_stmt, params, concurrency=32, raise_on_first_error=True)
        for bucket, (ok, result) in zip(buckets, results):
            for row in result:
                keys = out.setdefault(bucket, {})
                keys[row.key] = keys.get(row.key, 0) + row.value
        return out

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.shutdown()


def delete_absorbed(settings: Settings, cutoff_s: int) -> int:
    """Delete realtime rows of ingest buckets below `cutoff_s` (absorbed by the serving batch
    version); the number of range deletions issued. Only call after the batch swap."""
    from cassandra.concurrent import execute_concurrent_with_args

    cluster = cassandra_cluster(settings, timeout_s=30)
    session = cluster.connect(settings.cassandra.keyspace)
    try:
        by_bucket = session.prepare(
            f"DELETE FROM {BY_BUCKET} WHERE view_name = ? AND granularity = ? AND event_bucket = ? AND ingest_bucket < ?")
        partitions = list(session.execute(f"SELECT DISTINCT view_name, granularity, event_bucket FROM {BY_BUCKET}"))
        params = [(p.view_name, p.granularity, p.event_bucket, cutoff_s) for p in partitions]
        by_key = session.prepare(
            f"DELETE FROM {BY_KEY} WHERE view_name = ? AND granularity = ? AND key = ? AND event_bucket = ? AND ingest_bucket < ?")
        old = session.prepare(f"SELECT event_bucket FROM {BY_KEY} WHERE view_name = ? AND granularity = ? AND key = ? "
                              "AND ingest_bucket < ? ALLOW FILTERING")
        key_params = []
        for p in session.execute(f"SELECT DISTINCT view_name, granularity, key FROM {BY_KEY}"):
            buckets = {r.event_bucket for r in session.execute(old, (p.view_name, p.granularity, p.key, cutoff_s))}
            key_params.extend((p.view_name, p.granularity, p.key, b, cutoff_s) for b in buckets)
        for statement, rows in ((by_bucket, params), (by_key, key_params)):
            for ok, result in execute_concurrent_with_args(session, statement, rows, concurrency=32, raise_on_first_error=False):
                if not ok:
                    raise RuntimeError(f"realtime clean-up failed: {result}")
        return len(params) + len(key_params)
    finally:
        cluster.shutdown()
