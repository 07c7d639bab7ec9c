"""The realtime clean-up with a cutoff per view, on the real Cassandra in a keyspace of its own: each
view loses exactly its rows below its own cutoff; a view without a cutoff (no batch table serves
it) keeps every row."""

from __future__ import annotations

from stores.realtime import BY_BUCKET, BY_KEY, RealtimeRow, RealtimeWriter
from stores.realtime_cleanup import delete_absorbed
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
