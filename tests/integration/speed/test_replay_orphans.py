"""Rows of replays that no mark refers to any more (a `--cancel` that could not delete them, a replay
refused at its switch, one killed before it deleted the rows it replaced) are found by the realtime
clean-up and deleted, on the real Cassandra and HDFS (a keyspace and a marks directory of its own):
every row of theirs goes, above the cutoff too; the rows a claim, a `--resume`'s take-over or an
overlay refers to stay, as do the views' own rows and those of a view whose claim file is empty; a
claim made during the settle keeps its rows."""

from __future__ import annotations

from stores.realtime import RealtimeRow, RealtimeWriter
from stores.realtime_cleanup import delete_absorbed
from stores.realtime_schema import BY_BUCKET, BY_KEY
from stores.replays import mark, marks_dir, read_replays, shadow_name, switch
from stores.webhdfs import WebHdfs
from tests.integration.speed.test_realtime_cleanup import own  # noqa: F401  (the keyspace fixture)

T = 1_800_000_000
V, W, C, E = "page_views", "top_pages", "page_views_by_channel", "unique_visitors"


def _remove(settings, path: str) -> None:
    with WebHdfs(settings) as fs:
        fs.delete(path, recursive=True)


def count(session, table: str, name: str) -> int:
    return session.execute(f"SELECT count(*) FROM {table} WHERE view_name = %s ALLOW FILTERING", (name,)).one()[0]


def test_rows_no_replay_mark_refers_to_are_deleted_and_every_other_row_stays(own, unique, request):  # noqa: F811
    from lambdactl.replay_orphans import delete_orphaned_replays

    keyspace_settings, session = own
    mine = keyspace_settings.model_copy(
        update={
            "speed": keyspace_settings.speed.model_copy(
                update={"checkpoint_dir": f"/lambda/test-orphans-{unique}/speed"}
            )
        }
    )
    orphans = {shadow_name(V, 1_000), shadow_name(W, 2_500)}
    late_claim = shadow_name(C, 1_200)  # unreferenced when first read, claimed during the settle
    empty_claim = shadow_name(E, 1_300)  # its view's claim file is empty: a replay may switch under it
    kept_by_key = [V, shadow_name(V, 1_500), shadow_name(V, 2_000), empty_claim]  # own; taken over; claimed
    kept_by_bucket = [W, shadow_name(W, 3_000)]  # own rows; the newest overlay
    writer = RealtimeWriter(mine)
    try:
        for ib in (T - 120, T + 60):  # below the clean-up's cutoff, and above it
            writer.write(
                [
                    RealtimeRow(n, "minute", "/a", T - 600, ib, 1)
                    for n in [*kept_by_key, shadow_name(V, 1_000), late_claim]
                ],
                [RealtimeRow(n, "minute", "/a", T - 600, ib, 1) for n in [*kept_by_bucket, shadow_name(W, 2_500)]],
            )
    finally:
        writer.close()
    request.addfinalizer(lambda: _remove(mine, f"/lambda/test-orphans-{unique}"))
    mark(mine, V, 0, 2_000, shadow=shadow_name(V, 2_000), replaces=(1_500,))  # a --resume's claim
    switch(mine, mark(mine, W, 0, 3_000, shadow=shadow_name(W, 3_000)), 3_060_000)
    with WebHdfs(mine) as fs:
        fs.write(f"{marks_dir(mine)}/{E}.json", b"")

    seen = delete_absorbed(mine, {"no_such_view": T}).views_seen
    assert seen == {*kept_by_key, *kept_by_bucket, *orphans, late_claim}, "the scan below T names every view"

    waited: list[float] = []

    def settle(seconds: float) -> None:  # a replay claims C's mark while the clean-up waits
        waited.append(seconds)
        mark(mine, C, 0, 1_200, shadow=late_claim)

    deleted = delete_orphaned_replays(mine, seen, settle_s=70.0, wait=settle)

    assert waited == [70.0]
    assert (deleted.names, deleted.rows, deleted.complete) == (sorted(orphans), 4, True)
    for name in orphans:
        assert count(session, BY_KEY, name) + count(session, BY_BUCKET, name) == 0, name
    for name in [*kept_by_key, late_claim]:
        assert count(session, BY_KEY, name) == 2, name
    for name in kept_by_bucket:
        assert count(session, BY_BUCKET, name) == 2, name
    claims, overlays = read_replays(mine)
    assert set(claims) == {V, C, E} and set(overlays) == {W}, "the marks are left as they were"
    assert claims[E].unreadable and not claims[V].unreadable, "an empty claim is a mark that is no mark"
    left = delete_absorbed(mine, {"no_such_view": T}).views_seen
    nothing = delete_orphaned_replays(mine, left, settle_s=0.0, wait=waited.append)
    assert not left & orphans and not nothing.names and waited == [70.0], "nothing is left, and no wait"
