"""The realtime views in Cassandra: idempotent upserts and reads for the merge. The tables, their
keys and options: stores.realtime_schema; statements in flight and in batches: stores.realtime_statements.

Rows hold absolute values for their (key, event bucket, ingest bucket): a replayed micro-batch
writes the same values again. Every row carries the table's TTL (settings.realtime_ttl_s).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from definitions.settings import Settings
from definitions.views import MAX_SKETCH_BYTES, key_text
from stores import realtime_ttl
from stores.adapters import ROW_BYTES, ReadTooLarge, text_bytes
from stores.clients import cassandra_cluster
from stores.realtime_schema import BY_BUCKET, BY_KEY, TABLES, ensure_schema, ttl_changes_of
from stores.realtime_statements import execute_all_with_retries, replica_batches
from stores.realtime_writes import MarkReader, WriteMarks

log = logging.getLogger(__name__)


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
        outage_s = self.settings.speed.store_outage_s
        deadline = time.monotonic() + outage_s  # the writes and their mark: one outage, one wait
        execute_all_with_retries(
            self.session,
            [(batch, ()) for batch in batches],
            self.settings.speed.write_concurrency,
            outage_s,
            deadline=deadline,
        )
        execute_all_with_retries(
            self.session, [self.marks.next_mark()], 1, outage_s, "realtime write marks", deadline=deadline
        )

    def _replicas(self, routing_key: bytes) -> tuple[str, ...]:
        hosts = self.cluster.metadata.get_replicas(self.settings.cassandra.keyspace, routing_key)
        return tuple(sorted(str(host.endpoint) for host in hosts))

    def close(self) -> None:
        self.cluster.shutdown()


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


def _text(value: str) -> bool:
    """Whether `value` is text (UTF-8 can hold it): JSON's escapes can spell a lone surrogate, which
    the event contract refuses, so no event wrote one."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def canonical_key(key: object) -> str:
    """A by_bucket row's key as key_text writes it. Another spelling of the same values (spaces,
    escapes) would otherwise be a second row of the same key, its counts split between them."""
    import json

    try:
        values = json.loads(key)  # type: ignore[arg-type]
    except (TypeError, ValueError, RecursionError):  # RecursionError: a key of thousands of "["
        values = None
    if not isinstance(values, list) or not all(v is None or (isinstance(v, str) and _text(v)) for v in values):
        raise BadRealtimeRow(f"a key that is not a JSON array of strings: {str(key)[:100]!r}")
    return key_text(values)


@dataclass
class RealtimeCell:
    """The speed part of one event bucket: the values summed over the ingest buckets read."""

    value: int = 0
    sketches: list[bytes] | None = None
    ingest_buckets: int = 0


# A page of realtime rows a query's read fetches holds at most this many bytes, counting every row
# as large as it can be; at most READS_IN_FLIGHT pages are fetched ahead of the one being read.
PAGE_BYTES = 4 * 2**20
READS_IN_FLIGHT = 4
ROW_FIELDS_BYTES = 64  # a row's buckets, value and framing


def page_rows(settings: Settings, with_key: bool) -> int:
    """Rows a page of a read asks for: within PAGE_BYTES of rows whose key (JSON-quoted, each byte at
    most 2) is the longest the `events.*` limits allow, or whose sketch is the largest a view holds."""
    row = ROW_FIELDS_BYTES + (2 * settings.events.worst_key_bytes() if with_key else MAX_SKETCH_BYTES)
    return max(1, min(5_000, PAGE_BYTES // row))


class RealtimeReader:
    """Reads realtime rows for the merge: only ingest buckets at or after a cutoff are ever read."""

    IN_CHUNK = 100

    def __init__(self, settings: Settings, session=None, timeout_s: float = 10.0) -> None:
        """Reads through `session`, or through a cluster connection of its own (closed by close())."""
        self.settings = settings
        self.cluster: Any | None = None  # shut down by close(); set when this reader owns the cluster
        try:
            self._set_up(session, timeout_s)
        except BaseException:  # a keyspace or table missing, a prepare timing out: no cluster left behind
            if self.cluster is not None:
                self.cluster.shutdown()
            raise

    def _set_up(self, session, timeout_s: float) -> None:
        settings = self.settings
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
        # Pages bounded in bytes, not the driver's 5,000 rows (rows of 4 KB keys: 40 MB a page).
        self.series_stmt.fetch_size = page_rows(settings, with_key=False)
        self.bucket_stmt.fetch_size = page_rows(settings, with_key=True)
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
            if value is None:
                raise BadRealtimeRow(f"{view}: a row of bucket {event_bucket} without its value")
            if value < 0:
                raise BadRealtimeRow(f"{view}: a row of bucket {event_bucket} holds a negative value {value}")
            # What the read holds: each key once (as read and as canonical), and an entry per event
            # bucket it is in; a key's rows of further ingest buckets only add to its entry.
            known = canonical.get(key)
            keys = out.setdefault(event_bucket, {})
            if known is None or known not in keys:
                held += ROW_BYTES + (2 * text_bytes(key) if known is None else 0)
                if held > self.max_bytes:
                    raise self._too_large(view)
            if known is None:
                known = canonical.setdefault(key, canonical_key(key))
            keys[known] = keys.get(known, 0) + value
        return out

    def _rows(self, statement, params: list[tuple]) -> Iterable[tuple]:
        """The rows (plain tuples) of `statement` once per parameter tuple, in order: READS_IN_FLIGHT
        sent ahead, the next sent only as one is read. The driver's concurrent execution sent the next
        as each answered, so every statement's first page was held before any row was counted. Each
        later page is asked for with its own timeout (the driver's own paging waits without one)."""
        ahead = iter(params)
        pending: deque = deque()

        def send() -> None:
            for values in ahead:
                pending.append((values, self.session.execute_async(statement, values, execution_profile=self.tuples)))
                return

        try:
            for _ in range(READS_IN_FLIGHT):
                send()
            while pending:
                values, future = pending.popleft()
                page = future.result()
                send()
                while True:
                    yield from page.current_rows
                    if not page.has_more_pages:
                        break
                    page = self.session.execute_async(
                        statement, values, execution_profile=self.tuples, paging_state=page.paging_state
                    ).result()
        finally:
            pending.clear()  # a read stopped part-way: the pages still coming are not kept

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.shutdown()
