"""The realtime views in Cassandra: schema, idempotent upserts, and reads for the merge.

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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from definitions.settings import Settings
from definitions.views import key_text
from stores import realtime_ttl
from stores.adapters import ROW_BYTES, ReadTooLarge
from stores.clients import cassandra_cluster
from stores.realtime_writes import MarkReader, WriteMarks, create_statement

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
    return [spec.create(ks, options) for spec in TABLES.values()] + [marks]


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


def execute_with_retries(
    session, statement, params: Sequence[tuple], concurrency: int, give_up_after_s: float, what: str = "realtime writes"
) -> None:
    """Execute `statement` once per parameter tuple, many in flight (execute_all_with_retries)."""
    execute_all_with_retries(session, [(statement, p) for p in params], concurrency, give_up_after_s, what)


def execute_all_with_retries(
    session,
    statements: Sequence[tuple[Any, Sequence[Any]]],
    concurrency: int,
    give_up_after_s: float,
    what: str = "realtime writes",
) -> None:
    """Execute every (statement, parameters), many in flight; retry the failed ones with backoff
    (up to 10 s apart) until `give_up_after_s` has passed, so a store that is restarting or briefly
    unreachable delays the work instead of failing it; then raise naming the error."""
    from cassandra.concurrent import execute_concurrent

    pending, error, attempt = list(statements), None, 0
    deadline = time.monotonic() + give_up_after_s
    while pending:
        attempt += 1
        try:
            results = execute_concurrent(session, pending, concurrency=concurrency, raise_on_first_error=False)
            failed = [p for p, (ok, _) in zip(pending, results) if not ok]
            error = next((result for ok, result in results if not ok), None)
        except Exception as exc:  # every host down: the driver may raise instead of listing failures
            failed, error = pending, exc
        if failed:
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"{len(failed)} {what} still failing after {attempt} attempts in "
                    f"{give_up_after_s:.0f}s: {type(error).__name__}: {error}"
                )
            log.warning(
                "%d %s failed (attempt %d): %s: %s; retrying", len(failed), what, attempt, type(error).__name__, error
            )
            time.sleep(min(2**attempt, 10))
        pending = failed


ROW_OVERHEAD_BYTES = 32  # Cassandra counts a row's timestamps and cell headers too


def value_bytes(params: Sequence[Any]) -> int:
    """About how many bytes a row takes in a batch, as Cassandra's batch size limits count them."""
    return ROW_OVERHEAD_BYTES + sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in params if v is not None)


def replica_groups(statements: Iterable[Any], replicas_of, max_bytes: int) -> list[list[Any]]:
    """Statements (with `routing_key` and serialized `values`) in groups to send as one batch each:
    statements whose partitions live on the same replicas (`replicas_of(routing_key)`) together, in
    their order, each group up to `max_bytes` (value_bytes) unless one statement alone is larger.
    With `max_bytes` 0 every statement is a group of its own."""
    if max_bytes <= 0:
        return [[statement] for statement in statements]
    open_groups: dict[Any, tuple[list[Any], int]] = {}
    groups: list[list[Any]] = []
    for statement in statements:
        replicas = replicas_of(statement.routing_key)
        size = value_bytes(statement.values)
        group, used = open_groups.get(replicas, (None, 0))
        if group is None or used + size > max_bytes:
            group, used = [], 0
            groups.append(group)
        group.append(statement)
        open_groups[replicas] = (group, used + size)
    return groups


def replica_batches(bound: Iterable[Any], replicas_of, max_bytes: int) -> list[Any]:
    """Bound statements as unlogged batches of replica_groups (a group of one stays a statement)."""
    from cassandra.query import BatchStatement, BatchType

    out: list[Any] = []
    for group in replica_groups(bound, replicas_of, max_bytes):
        if len(group) == 1:
            out.append(group[0])
            continue
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        for statement in group:
            batch.add(statement)
        out.append(batch)
    return out


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
        self.by_key = self.session.prepare(TABLES[BY_KEY].insert())
        self.by_bucket = self.session.prepare(TABLES[BY_BUCKET].insert())
        self.marks = WriteMarks(self.session, "rows")

    def write(
        self, by_key: Sequence[RealtimeRow], by_bucket: Sequence[RealtimeRow], timestamp_us: int | None = None
    ) -> None:
        """Upsert the rows with write timestamp `timestamp_us` (default: now). The speed layer gives
        every row of a micro-batch its batch's timestamp, larger than any earlier batch's: whichever
        process writes a row and whenever a late retry of an older batch lands, Cassandra keeps the
        newest batch's value. Once every row is stored, the write is marked (stores.realtime_writes):
        readers that kept rows read before it then read again."""
        if not by_key and not by_bucket:
            return
        now = int(time.time() * 1000)
        ts = timestamp_us if timestamp_us is not None else now * 1000
        from cassandra.query import UNSET_VALUE

        # A row without a sketch (count and sum views) leaves that column unset: a null bound for it
        # would write a cell tombstone per row and write, which every read of the partition meets.
        bound = [
            self.by_key.bind(
                (
                    r.view,
                    r.granularity,
                    r.key,
                    r.event_bucket,
                    r.ingest_bucket,
                    r.value,
                    UNSET_VALUE if r.sketch is None else r.sketch,
                    now,
                    ts,
                )
            )
            for r in by_key
        ] + [
            self.by_bucket.bind((r.view, r.granularity, r.event_bucket, r.ingest_bucket, r.key, r.value, now, ts))
            for r in by_bucket
        ]
        batches = replica_batches(bound, self._replicas, self.settings.speed.write_batch_bytes)
        execute_all_with_retries(
            self.session,
            [(batch, ()) for batch in batches],
            self.settings.speed.write_concurrency,
            self.settings.speed.store_outage_s,
        )
        execute_all_with_retries(
            self.session,
            [self.marks.next_mark()],
            1,
            self.settings.speed.store_outage_s,
            "realtime write marks",
        )

    def _replicas(self, routing_key: bytes) -> tuple[str, ...]:
        hosts = self.cluster.metadata.get_replicas(self.settings.cassandra.keyspace, routing_key)
        return tuple(sorted(str(host.endpoint) for host in hosts))

    def close(self) -> None:
        self.cluster.shutdown()


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


def chunks(items: Sequence, size: int) -> Iterable[Sequence]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def refused_by_server(exc: BaseException) -> bool:
    """Cassandra answered, refusing this one query (a replica's timeout or failure, such as too many
    tombstones in a partition; an invalid request): the connection is fine, so a new session would
    not help (a client-side timeout or no host answering are not such answers)."""
    from cassandra import RequestExecutionException, RequestValidationException

    return isinstance(exc, (RequestExecutionException, RequestValidationException))


class BadRealtimeRow(ValueError):
    """A realtime row the speed layer cannot have written (a null value, a distinct view's row
    without its sketch, a key that is not a JSON array of strings): the store's content, not its
    connection, is wrong, so reading it again or from a new session would not help."""


def canonical_key(key: object) -> str:
    """A by_bucket row's key as key_text writes it. Another spelling of the same values (spaces,
    escapes) would otherwise be a second row of the same key, its counts split between them."""
    import json

    try:
        values = json.loads(key)  # type: ignore[arg-type]
    except (TypeError, ValueError, RecursionError):  # RecursionError: a key of thousands of "["
        values = None
    if not isinstance(values, list) or not all(v is None or isinstance(v, str) for v in values):
        raise BadRealtimeRow(f"a key that is not a JSON array of strings: {str(key)[:100]!r}")
    return key_text(values)


@dataclass
class RealtimeCell:
    """The speed part of one event bucket: the values summed over the ingest buckets read."""

    value: int = 0
    sketches: list[bytes] | None = None
    ingest_buckets: int = 0


class RealtimeReader:
    """Reads realtime rows for the merge: only ingest buckets at or after a cutoff are ever read."""

    IN_CHUNK = 100

    def __init__(self, settings: Settings, session=None, timeout_s: float = 10.0) -> None:
        """Reads through `session`, or through a cluster connection of its own (closed by close())."""
        self.settings = settings
        self.cluster: Any | None = None  # shut down by close(); set when this reader owns the cluster
        if session is None:
            self.cluster = cassandra_cluster(settings, timeout_s=timeout_s)
            session = self.cluster.connect(settings.cassandra.keyspace)
        self.session = session
        # Rows as plain tuples: the driver's default makes a namedtuple class for every result set,
        # a large share of a query's CPU in the API.
        from cassandra.cluster import EXEC_PROFILE_DEFAULT
        from cassandra.query import tuple_factory

        self.tuples = session.execution_profile_clone_update(EXEC_PROFILE_DEFAULT, row_factory=tuple_factory)
        self.series_stmt = session.prepare(
            f"SELECT event_bucket, ingest_bucket, value, sketch FROM {BY_KEY} "
            "WHERE view_name = ? AND granularity = ? AND key = ? AND event_bucket IN ? AND ingest_bucket >= ?"
        )
        # One query per IN_CHUNK event buckets (partitions): one round trip, the node reads them locally.
        self.bucket_stmt = session.prepare(
            f"SELECT event_bucket, ingest_bucket, key, value FROM {BY_BUCKET} WHERE view_name = ? AND granularity = ? "
            "AND event_bucket IN ? AND ingest_bucket >= ?"
        )
        self.marks = MarkReader(session, self.tuples)
        self.max_bytes = settings.api.max_read_mib * 2**20

    def _too_large(self, view: str) -> ReadTooLarge:
        return ReadTooLarge(
            f"{view}: the window holds more than {self.settings.api.max_read_mib} MiB of realtime rows "
            "(api.max_read_mib); ask for a narrower window"
        )

    def ttl_changes(self) -> tuple[realtime_ttl.TtlChange, ...]:
        """ttl_changes_of this reader's keyspace."""
        return ttl_changes_of(self.session, self.settings.cassandra.keyspace, execution_profile=self.tuples)

    def generation(self) -> frozenset[tuple[str, int]]:
        """Every writer's last write mark (stores.realtime_writes): while it is the same, no realtime
        row was written or deleted since it was read."""
        return self.marks.read()

    def series(
        self,
        view: str,
        granularity: str,
        key: str,
        buckets: Sequence[int],
        min_ingest_bucket: int,
        with_sketches: bool = False,
        skip_ingest: tuple[int, int] | None = None,
    ) -> dict[int, RealtimeCell]:
        low, high = skip_ingest or (0, 0)
        params = [
            (view, granularity, key, list(chunk), min_ingest_bucket) for chunk in chunks(list(buckets), self.IN_CHUNK)
        ]
        out: dict[int, RealtimeCell] = {}
        held = 0
        for event_bucket, ingest_bucket, value, sketch in self._rows(self.series_stmt, params):
            if low <= ingest_bucket < high:
                continue
            held += ROW_BYTES + (len(sketch) if with_sketches and sketch is not None else 0)
            if held > self.max_bytes:
                raise self._too_large(view)
            if value is None or (with_sketches and sketch is None):
                raise BadRealtimeRow(f"{view}: a row of bucket {event_bucket} without its value or sketch")
            if value < 0:  # every number field of the event contract is non-negative: damage, not data
                raise BadRealtimeRow(f"{view}: a row of bucket {event_bucket} holds a negative value {value}")
            cell = out.setdefault(event_bucket, RealtimeCell(sketches=[] if with_sketches else None))
            cell.value += value
            cell.ingest_buckets += 1
            if cell.sketches is not None:  # a list exactly when with_sketches
                cell.sketches.append(bytes(sketch))
        return out

    def bucket(
        self,
        view: str,
        granularity: str,
        buckets: Sequence[int],
        min_ingest_bucket: int,
        skip_ingest: tuple[int, int] | None = None,
    ) -> dict[int, dict[str, int]]:
        """{event bucket: {key: value summed over ingest buckets >= min}} for a by_bucket view."""
        low, high = skip_ingest or (0, 0)
        params = [(view, granularity, list(chunk), min_ingest_bucket) for chunk in chunks(list(buckets), self.IN_CHUNK)]
        out: dict[int, dict[str, int]] = {}
        canonical: dict[str, str] = {}  # each key as stored → as key_text writes it (parsed once per read)
        held = 0
        for event_bucket, ingest_bucket, key, value in self._rows(self.bucket_stmt, params):
            if low <= ingest_bucket < high:
                continue
            held += ROW_BYTES + 2 * len(key)
            if held > self.max_bytes:
                raise self._too_large(view)
            if value is None:
                raise BadRealtimeRow(f"{view}: a row of bucket {event_bucket} without its value")
            if value < 0:
                raise BadRealtimeRow(f"{view}: a row of bucket {event_bucket} holds a negative value {value}")
            known = canonical.get(key)
            key = known if known is not None else canonical.setdefault(key, canonical_key(key))
            keys = out.setdefault(event_bucket, {})
            keys[key] = keys.get(key, 0) + value
        return out

    def _rows(self, statement, params: list[tuple]) -> Iterable[tuple]:
        """The rows (plain tuples) of `statement` once per parameter tuple, sent concurrently."""
        from cassandra.concurrent import execute_concurrent_with_args

        results = execute_concurrent_with_args(
            self.session, statement, params, concurrency=16, raise_on_first_error=True, execution_profile=self.tuples
        )
        for _ok, result in results:
            yield from result

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.shutdown()
