"""The realtime clean-up on the real Cassandra, in a keyspace of its own: it deletes exactly the rows
below the cutoff, keeps the rest, and a partition holding more tombstones than Cassandra will scan
is reported as unreadable instead of failing the clean-up. The tables follow the TTL, gc grace
and compaction settings."""

from __future__ import annotations

import time

import pytest

from infra.bootstrap import ensure_keyspace
from stores.clients import cassandra_cluster
from stores.realtime import RealtimeReader, RealtimeRow, RealtimeWriter
from stores.realtime_cleanup import delete_absorbed
from stores.realtime_schema import BY_BUCKET, BY_KEY, clear_rows, ensure_schema
from stores.realtime_ttl import CHANGE_MARGIN_MS
from stores.realtime_writes import MarkReader

CUTOFF = 1_800_000_000
BELOW, ABOVE = (CUTOFF - 120, CUTOFF - 60), (CUTOFF, CUTOFF + 60)
POISON_TOMBSTONES = 110_000  # above Cassandra's tombstone_failure_threshold (100,000)


def _settings(settings, keyspace: str, **speed):
    return settings.model_copy(
        update={
            "cassandra": settings.cassandra.model_copy(update={"keyspace": keyspace}),
            "speed": settings.speed.model_copy(update=speed),
        }
    )


@pytest.fixture
def own(settings, stack, unique):
    """Settings pointing at a fresh keyspace with the realtime tables, and a session on it."""
    mine = _settings(settings, f"cleanup_{unique}")
    ensure_keyspace(mine)
    cluster = cassandra_cluster(mine, timeout_s=60)
    session = cluster.connect(mine.cassandra.keyspace)
    yield mine, session
    session.execute(f"DROP KEYSPACE IF EXISTS {mine.cassandra.keyspace}")
    cluster.shutdown()


def _options(session, keyspace: str, table: str):
    return session.execute(
        "SELECT default_time_to_live, gc_grace_seconds, compaction FROM system_schema.tables "
        "WHERE keyspace_name = %s AND table_name = %s",
        (keyspace, table),
    ).one()


def test_tables_follow_ttl_gc_grace_and_compaction_settings(own):
    mine, session = own
    ks = mine.cassandra.keyspace
    for table in (BY_KEY, BY_BUCKET):
        row = _options(session, ks, table)
        assert (row.default_time_to_live, row.gc_grace_seconds) == (mine.realtime_ttl_s, mine.speed.gc_grace_s)
        assert row.compaction["unchecked_tombstone_compaction"] == "true"
    old_ttl = mine.realtime_ttl_s
    assert RealtimeReader(mine, session).ttl_changes() == ((0, old_ttl),)  # no change recorded yet
    changed = _settings(mine, ks, ttl_s=old_ttl + 86_400, gc_grace_s=600)
    before_ms = int(time.time() * 1000)
    ensure_schema(changed, session)
    after_ms = int(time.time() * 1000)
    for table in (BY_KEY, BY_BUCKET):
        row = _options(session, ks, table)
        assert (row.default_time_to_live, row.gc_grace_seconds) == (old_ttl + 86_400, 600)
        assert row.compaction["tombstone_compaction_interval"] == "600"
    # The raise is recorded with the ALTER: rows written before it keep the old TTL.
    (first, raised) = RealtimeReader(changed, session).ttl_changes()
    assert first == (0, old_ttl)
    assert before_ms + CHANGE_MARGIN_MS <= raised[0] <= after_ms + CHANGE_MARGIN_MS
    assert raised[1] == old_ttl + 86_400
    ensure_schema(changed, session)  # nothing to change: nothing recorded
    assert len(RealtimeReader(changed, session).ttl_changes()) == 2


COLUMNS = "view_name, granularity, key, event_bucket, ingest_bucket"


def test_cleanup_deletes_rows_below_the_cutoff_and_reports_what_it_cannot_read(own):
    from cassandra.metadata import Murmur3Token
    from cassandra.query import BatchStatement, BatchType

    mine, session = own
    by_key = [
        RealtimeRow("page_views", "minute", f"/page-{k}", eb, ib, 1)
        for k in range(40)
        for eb in (CUTOFF - 3_600, CUTOFF - 60)
        for ib in BELOW + ABOVE
    ]
    by_bucket = [
        RealtimeRow("top_pages", "minute", f"/page-{k}", eb, ib, 1)
        for k in range(5)
        for eb in range(CUTOFF - 600, CUTOFF, 60)
        for ib in BELOW + ABOVE
    ]
    writer = RealtimeWriter(mine)
    writer.write(by_key, by_bucket)
    writer.close()

    # A partition whose rows below the cutoff sit behind more range tombstones than a read may scan.
    poison = ("page_views", "minute", "/poisoned")
    delete = session.prepare(
        f"DELETE FROM {BY_KEY} WHERE view_name = ? AND granularity = ? AND key = ? "
        "AND event_bucket = ? AND ingest_bucket < ?"
    )
    batches = []
    for start in range(0, POISON_TOMBSTONES, 500):  # one partition: each batch is a single mutation
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        for eb in range(start, min(start + 500, POISON_TOMBSTONES)):
            batch.add(delete, (*poison, eb, CUTOFF))
        batches.append(batch)
    for batch in batches:
        session.execute(batch)
    session.execute(
        f"INSERT INTO {BY_KEY} (view_name, granularity, key, event_bucket, ingest_bucket, value) "
        "VALUES (%s, %s, %s, %s, %s, 1)",
        (*poison, 10 * POISON_TOMBSTONES, BELOW[0]),
    )
    # The partition cannot be read any more, not even for its token: hash its key as the driver routes it.
    poison_token = Murmur3Token.from_key(delete.bind((*poison, 0, CUTOFF)).routing_key).value

    cleanup = delete_absorbed(mine, CUTOFF)

    assert cleanup.rows_below_cutoff == len(by_key) // 2 + len(by_bucket) // 2
    # One deletion per (key, event bucket) of realtime_by_key, per event bucket of realtime_by_bucket.
    assert cleanup.deletions == 40 * 2 + 10
    assert not cleanup.complete and len(cleanup.unreadable) == 1
    gap = cleanup.unreadable[0]
    assert gap.table == BY_KEY and gap.start < poison_token <= gap.end
    assert "READ_TOO_MANY_TOMBSTONES" in gap.error
    assert gap.end - gap.start <= 2**44, "the unreadable part is narrowed down to a sliver of the ring"

    def kept(rows):
        return {
            (r.view, r.granularity, r.key, r.event_bucket, r.ingest_bucket) for r in rows if r.ingest_bucket >= CUTOFF
        }

    series = session.prepare(f"SELECT {COLUMNS} FROM {BY_KEY} WHERE view_name = ? AND granularity = ? AND key = ?")
    left = {tuple(r) for k in range(40) for r in session.execute(series, ("page_views", "minute", f"/page-{k}"))}
    assert left == kept(by_key)
    assert {tuple(r) for r in session.execute(f"SELECT {COLUMNS} FROM {BY_BUCKET}")} == kept(by_bucket)

    again = delete_absorbed(mine, CUTOFF)
    assert (again.rows_below_cutoff, again.deletions) == (0, 0)
    assert [(u.table, u.start, u.end) for u in again.unreadable] == [(gap.table, gap.start, gap.end)]


def test_a_fresh_checkpoint_empties_the_tables_of_an_earlier_one(settings, stack, unique):
    """clear_rows (the speed layer's start from a fresh checkpoint): a keyspace without the tables
    yet is left alone; tables holding rows are emptied, an empty one is not touched."""
    mine = _settings(settings, f"fresh_{unique}")
    cluster = cassandra_cluster(mine, timeout_s=60)
    session = cluster.connect()
    try:
        session.execute(
            f"CREATE KEYSPACE {mine.cassandra.keyspace} WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}"
        )
        assert clear_rows(mine) == [], "no tables yet: nothing to empty"
        ensure_schema(mine)
        writer = RealtimeWriter(mine)
        writer.write([RealtimeRow("page_views", "minute", f"/p{k}", CUTOFF, CUTOFF + 60 * k, 1) for k in range(30)], [])
        writer.close()
        count = lambda table: session.execute(f"SELECT count(*) FROM {mine.cassandra.keyspace}.{table}").one()[0]  # noqa: E731
        assert (count(BY_KEY), count(BY_BUCKET)) == (30, 0)
        session.set_keyspace(mine.cassandra.keyspace)
        marks = MarkReader(session)
        before = marks.read()
        assert clear_rows(mine) == [BY_KEY]
        assert (count(BY_KEY), count(BY_BUCKET)) == (0, 0)
        assert marks.read() != before, "the API's speed cache is told the rows changed"
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {mine.cassandra.keyspace}")
        cluster.shutdown()
