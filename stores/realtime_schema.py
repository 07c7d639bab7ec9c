"""The realtime views in Cassandra: their keyspace, tables and table options (writes and reads: stores.realtime).

Two tables serve every declared view (definitions/views.py):

- `realtime_by_key`: PRIMARY KEY ((view_name, granularity, key), event_bucket, ingest_bucket) — a
  view key's series; the merge reads, per event bucket, only ingest buckets >= the batch cutoff.
- `realtime_by_bucket`: PRIMARY KEY ((view_name, granularity, event_bucket), ingest_bucket, key) —
  every key of an event bucket together, for top-N queries of `by_bucket` views.

Rows hold absolute values for their (key, event bucket, ingest bucket): a replayed micro-batch
writes the same values again. Every row carries the table's TTL (settings.realtime_ttl_s).

Deletes (stores/realtime_cleanup.py) and expired rows leave tombstones, which reads scan until
`gc_grace_seconds` has passed and a compaction has purged them. Rows here are ephemeral (never read
below the serving cutoff, expiring by TTL), so a deletion that a replica missed and that comes back
is harmless: the tables keep a short `gc_grace_seconds` (settings.speed.gc_grace_s) and let
compaction drop tombstones from a single SSTable, instead of Cassandra's 10 days.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from definitions.settings import Settings
from stores import realtime_origin, realtime_ttl
from stores.clients import cassandra_cluster
from stores.realtime_writes import WriteMarks, create_statement

log = logging.getLogger(__name__)

BY_KEY = "realtime_by_key"
BY_BUCKET = "realtime_by_bucket"


class TableOptions(TypedDict):
    default_time_to_live: int
    gc_grace_seconds: int
    compaction: dict[str, str]


def table_options(settings: Settings) -> TableOptions:
    """What `ensure_schema` keeps in line with settings on both tables."""
    grace = settings.speed.gc_grace_s
    return {
        "default_time_to_live": settings.realtime_ttl_s,
        "gc_grace_seconds": grace,
        "compaction": {
            "class": "org.apache.cassandra.db.compaction.SizeTieredCompactionStrategy",
            "unchecked_tombstone_compaction": "true",
            "tombstone_compaction_interval": str(max(grace, 60)),
            "max_threshold": "32",
            "min_threshold": "4",
        },
    }


def _with(options: Mapping[str, object]) -> str:
    def literal(value: object) -> str:
        if isinstance(value, dict):
            return "{" + ", ".join(f"'{k}': '{v}'" for k, v in value.items()) + "}"
        return str(value)

    return " AND ".join(f"{name} = {literal(value)}" for name, value in options.items())


@dataclass(frozen=True)
class TableSpec:
    """One realtime table, declared once: its schema, its writer's statement and the keys the
    clean-up and the reports read by all come from here."""

    name: str
    columns: tuple[tuple[str, str], ...]  # (column, CQL type), in insert order
    partition_key: tuple[str, ...]
    clustering: tuple[str, ...]

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)

    def create(self, keyspace: str, options: str) -> str:
        columns = ", ".join(f"{name} {kind}" for name, kind in self.columns)
        key = f"(({', '.join(self.partition_key)}), {', '.join(self.clustering)})"
        return f"CREATE TABLE IF NOT EXISTS {keyspace}.{self.name} ({columns}, PRIMARY KEY {key}) WITH {options}"

    def insert(self) -> str:
        """An upsert whose write timestamp is bound (the last parameter): the micro-batch's."""
        names = self.column_names
        return (
            f"INSERT INTO {self.name} ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)}) USING TIMESTAMP ?"
        )

    def before(self, column: str) -> tuple[str, ...]:
        """The clustering columns that come before `column` (a deletion names them, then a range on it)."""
        return self.clustering[: self.clustering.index(column)]


TABLES: dict[str, TableSpec] = {
    BY_KEY: TableSpec(
        BY_KEY,
        (
            ("view_name", "text"),
            ("granularity", "text"),
            ("key", "text"),
            ("event_bucket", "bigint"),
            ("ingest_bucket", "bigint"),
            ("value", "bigint"),
            ("sketch", "blob"),
            ("updated_ms", "bigint"),
        ),
        partition_key=("view_name", "granularity", "key"),
        clustering=("event_bucket", "ingest_bucket"),
    ),
    BY_BUCKET: TableSpec(
        BY_BUCKET,
        (
            ("view_name", "text"),
            ("granularity", "text"),
            ("event_bucket", "bigint"),
            ("ingest_bucket", "bigint"),
            ("key", "text"),
            ("value", "bigint"),
            ("updated_ms", "bigint"),
        ),
        partition_key=("view_name", "granularity", "event_bucket"),
        clustering=("ingest_bucket", "key"),
    ),
}


def schema(settings: Settings) -> list[str]:
    ks, options = settings.cassandra.keyspace, _with(table_options(settings))
    marks = create_statement(ks, settings.speed.gc_grace_s)  # stores.realtime_writes
    return [spec.create(ks, options) for spec in TABLES.values()] + [marks, realtime_origin.create_statement(ks)]


def ensure_keyspace(settings: Settings) -> None:
    """Create the platform's keyspace if missing, or bring its replication in line with settings
    (`cassandra.replication_factor` / `cassandra.replication`), then the realtime tables
    (ensure_schema)."""
    c = settings.cassandra
    cluster = cassandra_cluster(settings)
    try:
        session = cluster.connect()
        replication = ", ".join(f"'{k}': {v!r}" for k, v in c.replication_map.items())
        session.execute(f"CREATE KEYSPACE IF NOT EXISTS {c.keyspace} WITH replication = {{{replication}}}")
        row = session.execute(
            "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s", (c.keyspace,)
        ).one()
        if row is not None and not same_replication(dict(row.replication), c.replication_map):
            log.warning(
                "changing the replication of keyspace %s from %s to %s: on a cluster, run a full repair "
                "(`nodetool repair --full %s`) on every node so that added copies receive the existing rows",
                c.keyspace,
                dict(row.replication),
                c.replication_map,
                c.keyspace,
            )
            session.execute(f"ALTER KEYSPACE {c.keyspace} WITH replication = {{{replication}}}")
        ensure_schema(settings, session)
    finally:
        cluster.shutdown()


def clear_rows(settings: Settings) -> list[str]:
    """Empty the realtime tables that hold rows (TRUNCATE: every node must be up); the tables emptied.
    For a speed layer starting from a fresh checkpoint, which writes every row again from Kafka:
    rows left by an earlier checkpoint (another ingest bucket size, another dedupe window) would be
    read beside the new ones."""
    ks = settings.cassandra.keyspace
    cluster = cassandra_cluster(settings, timeout_s=120)
    try:
        session = cluster.connect()
        existing = {
            row.table_name
            for row in session.execute("SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (ks,))
        }
        cleared = []
        for table in TABLES:
            if table not in existing:
                continue
            try:
                empty = session.execute(f"SELECT view_name FROM {ks}.{table} LIMIT 1").one() is None
            except Exception as exc:  # noqa: BLE001 - tombstones past the read's limit, say: emptied all the same
                log.warning("could not tell whether %s.%s holds rows (%s): emptying it", ks, table, type(exc).__name__)
                empty = False
            if not empty:
                session.execute(f"TRUNCATE {ks}.{table}")
                cleared.append(table)
        if cleared:  # answers the API keeps until the realtime rows change are dropped (stores.realtime_writes)
            session.set_keyspace(ks)
            statement, params = WriteMarks(session, "truncate").next_mark()
            session.execute(statement, params)
        return cleared
    finally:
        cluster.shutdown()


def same_replication(stored: Mapping[str, str], wanted: Mapping[str, object]) -> bool:
    """Whether a keyspace's stored replication (system_schema: full class name, counts as text) is
    `wanted` (CassandraSettings.replication_map)."""
    short = {k: str(v) for k, v in stored.items()}
    short["class"] = short.get("class", "").rsplit(".", 1)[-1]
    return short == {k: str(v) for k, v in wanted.items()}


def ensure_schema(settings: Settings, session=None) -> None:
    """Create the realtime tables; bring their TTL, gc grace and compaction in line with settings,
    recording a change of TTL in the table's comment (stores.realtime_ttl)."""
    cluster = None  # ours to shut down when no session was given
    if session is None:
        cluster = cassandra_cluster(settings)
        session = cluster.connect()
    try:
        for statement in schema(settings):
            session.execute(statement)
        ks, wanted = settings.cassandra.keyspace, table_options(settings)
        now_ms = int(time.time() * 1000)  # one change time for both tables
        for table in (BY_KEY, BY_BUCKET):
            row = session.execute(
                "SELECT default_time_to_live, gc_grace_seconds, compaction, comment FROM system_schema.tables "
                "WHERE keyspace_name = %s AND table_name = %s",
                (ks, table),
            ).one()
            current = {
                "default_time_to_live": row.default_time_to_live,
                "gc_grace_seconds": row.gc_grace_seconds,
                "compaction": {k: row.compaction.get(k) for k in wanted["compaction"]},
            }
            if current != wanted:
                log.info("aligning %s.%s with settings: %s", ks, table, wanted)
                options = _with(wanted)
                if row.default_time_to_live != wanted["default_time_to_live"]:  # recorded in the same ALTER
                    comment = realtime_ttl.record_change(
                        realtime_ttl.parse_changes(row.comment),
                        row.default_time_to_live,
                        wanted["default_time_to_live"],
                        now_ms,
                    )
                    options += f" AND comment = '{comment}'"  # JSON of numbers: no quote to escape
                session.execute(f"ALTER TABLE {ks}.{table} WITH {options}")
    finally:
        if cluster is not None:
            cluster.shutdown()


def ttl_changes_of(session, keyspace: str, **options: Any) -> tuple[realtime_ttl.TtlChange, ...]:
    """The TTLs rows of either realtime table carry by when they were written (their current TTL and
    the changes their comments record: stores.realtime_ttl.combined); () before the tables exist."""
    rows = session.execute(
        "SELECT table_name, default_time_to_live, comment FROM system_schema.tables WHERE keyspace_name = %s",
        (keyspace,),
        **options,
    )
    tables = [(row[1] or 0, realtime_ttl.parse_changes(row[2])) for row in rows if row[0] in TABLES]
    if len(tables) < len(TABLES):  # not created yet: no row written, none to expire
        return ()
    return realtime_ttl.combined(tables)


def read_ttl_changes(settings: Settings) -> tuple[realtime_ttl.TtlChange, ...]:
    """ttl_changes_of the platform's keyspace, on a connection of its own."""
    cluster = cassandra_cluster(settings, timeout_s=30)
    try:
        return ttl_changes_of(cluster.connect(), settings.cassandra.keyspace)
    finally:
        cluster.shutdown()
