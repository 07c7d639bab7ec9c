"""The realtime clean-up with a cutoff per view, on the real Cassandra in a keyspace of its own: each
view loses exactly its rows below its own cutoff; a view without a cutoff (no batch table serves
it) keeps every row."""

from __future__ import annotations

from dataclasses import replace

from stores.realtime import RealtimeRow, RealtimeWriter
from stores.realtime_cleanup import delete_absorbed
from stores.realtime_schema import BY_BUCKET, BY_KEY
from tests.integration.speed.test_realtime_cleanup import COLUMNS, own  # noqa: F401  (the keyspace fixture)

T = 1_800_000_000
INGEST = (T - 180, T - 120, T - 60, T, T + 60)
CUTOFFS = {"page_views": T - 60, "top_pages": T}  # unique_visitors: none


def test_each_view_loses_only_its_rows_below_its_own_cutoff(own):  # noqa: F811
    mine, session = own
    by_key = [
        RealtimeRow(view, "minute", f"/p{k}", eb, ib, 1)
        for view in ("page_views", "unique_visitors")
        for k in range(6)
        for eb in (T - 3_600, T - 60)
        for ib in INGEST
    ]
    by_bucket = [
        RealtimeRow("top_pages", "minute", f"/p{k}", eb, ib, 1)
        for k in range(3)
        for eb in (T - 600, T - 60)
        for ib in INGEST
    ]
    writer = RealtimeWriter(mine)
    writer.write(by_key, by_bucket)
    writer.close()

    cleanup = delete_absorbed(mine, CUTOFFS)

    def below(rows):
        return [r for r in rows if r.view in CUTOFFS and r.ingest_bucket < CUTOFFS[r.view]]

    assert cleanup.complete and cleanup.cutoffs == CUTOFFS and cleanup.cutoff_s == T - 60
    assert cleanup.rows_below_cutoff == len(below(by_key)) + len(below(by_bucket))
    assert cleanup.deletions == 6 * 2 + 2  # page_views: per (key, event bucket); top_pages: per event bucket

    def kept(rows):
        return {(r.view, r.granularity, r.key, r.event_bucket, r.ingest_bucket) for r in rows if r not in below(rows)}

    assert {tuple(r) for r in session.execute(f"SELECT {COLUMNS} FROM {BY_KEY}")} == kept(by_key)
    assert {tuple(r) for r in session.execute(f"SELECT {COLUMNS} FROM {BY_BUCKET}")} == kept(by_bucket)
    again = delete_absorbed(mine, CUTOFFS)
    assert (again.rows_below_cutoff, again.deletions) == (0, 0)
    assert delete_absorbed(mine, {}).deletions == 0, "no view with a cutoff: nothing goes"


def test_a_deletion_as_of_a_time_spares_the_rows_written_after_it(own):  # noqa: F811
    """A retired view's deletion (lambdactl.batch.delete_retiring) is as of the last read that its
    view is not maintained: rows the speed layer writes after it (the view added back) survive."""
    mine, session = own
    before = [RealtimeRow("page_views", "minute", f"/p{k}", T - 60, ib, 1) for k in range(3) for ib in INGEST]
    after = [RealtimeRow("page_views", "minute", f"/q{k}", T - 60, ib, 2) for k in range(2) for ib in INGEST]
    writer = RealtimeWriter(mine)
    try:
        writer.write(before, [], timestamp_us=1_000)
        writer.write(after, [], timestamp_us=3_000)
        writer.write([replace(before[0], value=5)], [], timestamp_us=3_000)  # one row rewritten since
    finally:
        writer.close()

    cleanup = delete_absorbed(mine, {"page_views": T + 3_600}, timestamp_us=2_000)

    assert cleanup.complete and cleanup.rows_below_cutoff == len(before) + len(after)
    rows = {
        (r.key, r.ingest_bucket): r.value for r in session.execute(f"SELECT key, ingest_bucket, value FROM {BY_KEY}")
    }
    assert rows == {
        **{(r.key, r.ingest_bucket): 2 for r in after},
        (before[0].key, before[0].ingest_bucket): 5,
    }, "only what was written before the deletion's time is gone"
