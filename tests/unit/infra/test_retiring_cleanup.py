"""`delete_retiring` (what `views apply` and `lambdactl clean-realtime` run): which retiring storage
names lose their realtime rows, read against the speed layer's marker and the replay marks before
and after the settle wait. The stores are stand-ins here (what each one answers is set per case);
tests/integration/api/test_view_definition_change.py runs it on the real stack."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

import lambdactl.batch as batch
from stores.checkpoints import Marker
from stores.pointer import Pointer, ViewEntry
from stores.pointer_moves import retire

RETIRED = retire(
    Pointer({"page_views": ViewEntry("pv_1", 1, 60_000), "old": ViewEntry("old_1", 1, 60_000)}), ["old"], 1
)


class OneStore:
    def __init__(self, pointer: Pointer):
        self.value = pointer

    def pointer(self) -> Pointer:
        return self.value

    def swap(self, current: Pointer, new: Pointer) -> None:
        assert current == self.value
        self.value = new


@pytest.fixture
def stores(monkeypatch):
    """Stand-ins for the stores delete_retiring reads: `markers` and `marks` are answered in turn
    (the last one again), `deleted` records the clean-ups."""
    import stores.checkpoints
    import stores.realtime_cleanup
    import stores.registry
    import stores.replay_cleanup
    import stores.replays

    state = SimpleNamespace(
        store=OneStore(RETIRED),
        markers=[],
        marks=[],
        deleted=[],
        settled=0,
        overlays=[],
        dropped=[],
        as_of=[],
        marker_read_us=[],
    )

    def answer(queue):
        return queue.pop(0) if len(queue) > 1 else queue[0]

    monkeypatch.setattr(stores.registry, "version_store", lambda settings: state.store)

    def read_marker(settings):
        state.marker_read_us.append(time.time_ns() // 1000)
        return answer(state.markers)

    monkeypatch.setattr(stores.checkpoints, "read_marker", read_marker)
    monkeypatch.setattr(stores.replays, "read_marks", lambda settings: answer(state.marks))
    monkeypatch.setattr(stores.replays, "read_overlays", lambda settings: {m.view: m for m in state.overlays})
    monkeypatch.setattr(
        stores.replay_cleanup,
        "overlays_of",
        lambda settings, views: [m for m in state.overlays if m.view in views],
    )
    monkeypatch.setattr(stores.replay_cleanup, "drop_overlays_of", lambda settings, views: state.dropped.extend(views))

    def delete_absorbed(settings, cutoffs, timestamp_us=None):
        state.deleted.append(sorted(cutoffs))
        state.as_of.append(timestamp_us)
        return SimpleNamespace(complete=True, summary=lambda: "ok")

    monkeypatch.setattr(stores.realtime_cleanup, "delete_absorbed", delete_absorbed)
    monkeypatch.setattr(
        batch, "settle_after_swap", lambda settings, pointer: setattr(state, "settled", state.settled + 1)
    )
    return state


def marker(*views: str) -> Marker:
    return Marker(60, 0, views=dict.fromkeys(views, 0))


def test_a_retired_name_loses_its_rows_and_leaves_the_list(stores):
    stores.markers, stores.marks = [marker("page_views")], [{}]
    batch.delete_retiring(None)
    assert stores.deleted == [["old"]] and stores.settled == 1
    assert stores.store.value.retiring == ()


def test_a_retired_name_loses_the_rows_of_its_switched_replay_too(stores):
    from stores.replays import ReplayMark, shadow_name

    older = ReplayMark("old", 0, 3, shadow_name("old", 3), 30_000)  # left by a switch killed half-way
    replayed = ReplayMark("old", 0, 5, shadow_name("old", 5), 60_000)
    stores.markers, stores.marks = [marker("page_views")], [{}]
    stores.overlays = [older, replayed, ReplayMark("page_views", 0, 6, shadow_name("page_views", 6), 1)]
    batch.delete_retiring(None)
    assert stores.deleted == [["old", shadow_name("old", 3), shadow_name("old", 5)]], (
        "every replay of the retired view loses its rows, not another view's"
    )
    assert stores.dropped == ["old"]
    assert stores.store.value.retiring == ()


def test_a_name_a_replay_holds_keeps_its_rows_and_stays_retiring(stores):
    stores.markers, stores.marks = [marker("page_views")], [{"old": object()}]
    batch.delete_retiring(None)
    assert stores.deleted == [] and stores.store.value == RETIRED, "nothing deleted, the pointer did not move"


def test_a_replay_that_took_its_mark_during_the_settle_wait_keeps_the_rows(stores):
    stores.markers, stores.marks = [marker("page_views")], [{}, {"old": object()}]
    batch.delete_retiring(None)
    assert stores.settled == 1 and stores.deleted == [] and stores.store.value.retiring == ("old",)


def test_a_name_maintained_again_during_the_settle_wait_keeps_its_rows_and_is_live(stores):
    stores.markers, stores.marks = [marker("page_views"), marker("page_views", "old")], [{}]
    batch.delete_retiring(None)
    assert stores.deleted == [] and stores.store.value.retiring == ()


def test_a_marker_that_lists_no_views_deletes_nothing(stores):
    stores.markers, stores.marks = [Marker(60, 0, views=None)], [{}]
    batch.delete_retiring(None)
    assert stores.deleted == [] and stores.store.value == RETIRED


def test_the_deletion_spares_rows_written_after_the_last_read_of_the_marker(stores):
    """The deletion of a retired name scans both realtime tables: the name may be maintained again
    (`views apply` adding it back) while it runs. It deletes only rows written before the marker was
    last read without the name, so the rows of a speed layer that maintains it since survive."""
    stores.markers, stores.marks = [marker("page_views")], [{}]
    batch.delete_retiring(None)
    assert stores.deleted == [["old"]]
    (as_of,) = stores.as_of
    assert as_of is not None, "deleted as of a time, not whatever is there when the scan reaches it"
    first, last_before = stores.marker_read_us[:2]  # the reads before the deletion (a third follows it)
    assert first <= as_of <= last_before, (as_of, stores.marker_read_us)


def test_a_deletion_as_of_a_time_says_that_rows_written_after_it_were_counted_and_stay():
    """The count is of rows the scan read: with a timestamp, some of them survive, and the summary
    (what `clean-realtime` prints) says so rather than calling them all deleted."""
    from stores.realtime_cleanup import Cleanup

    plain = Cleanup(0, rows_below_cutoff=7, deletions=2).summary()
    assert "as of" not in plain and plain.startswith("7 realtime rows")
    dated = Cleanup(0, rows_below_cutoff=7, deletions=2, as_of_us=1_700_000_000_123_456).summary()
    assert "as of 2023-11-14T22:13:20Z" in dated and "counted and stay" in dated, dated


@pytest.mark.parametrize(
    ("left", "status"),
    [(None, 0), ("below", 5), ("retired", 5), ("orphans", 5)],
)
def test_clean_realtime_exits_non_zero_when_any_part_of_the_clean_up_is_left(stores, monkeypatch, caplog, left, status):
    """`lambdactl clean-realtime` (the DAG's last task) whose scan could not read every token range,
    whose retired rows were not all deleted, or whose pass over orphaned replays stopped, says so
    and exits 5 (answers are unaffected): a script sees it is not finished; the DAG logs it."""
    from lambdactl import replay_orphans
    from lambdactl.replay_orphans import Orphans
    from stores import realtime_cleanup
    from stores.realtime_cleanup import Cleanup
    from stores.realtime_scan import Unreadable

    stores.markers, stores.marks = [marker("page_views")], [{}]
    stores.store.record_run = lambda version, **fields: None
    calls = []

    def delete_absorbed(settings, cutoffs, timestamp_us=None):
        calls.append(sorted(cutoffs))
        broken = (left == "below" and len(calls) == 2) or (left == "retired" and len(calls) == 1)
        unreadable = [Unreadable("speed_by_key", 0, 1, "timed out")] if broken else []
        return Cleanup(0, unreadable=unreadable, views_seen={"page_views"})

    monkeypatch.setattr(realtime_cleanup, "delete_absorbed", delete_absorbed)
    orphans = Orphans(error="NoHostAvailable") if left == "orphans" else Orphans()
    monkeypatch.setattr(replay_orphans, "delete_orphaned_replays", lambda settings, seen: orphans)

    assert batch.cmd_clean_realtime(None, SimpleNamespace(json=False)) == status
    assert len(calls) == 2, "the retired view's rows, then the rows below the cutoffs"
    said = caplog.text
    assert ("clean-up incomplete" in said) == bool(status), said


def test_a_clean_up_during_the_speed_layers_restart_loses_no_retirement_of_views_apply(stores):
    """`views apply` marks a definition abandoned before it was built (no entry) retiring, then
    restarts the speed layer. A clean-up meanwhile reads the old marker, which still lists it: it
    takes the name for maintained again and unmarks it. The apply marks it again, so its rows go."""
    from lambdactl import views

    stores.store = OneStore(Pointer({"page_views": ViewEntry("pv_1", 1, 60_000)}))
    stores.markers, stores.marks = [marker("page_views", "abandoned")], [{}]
    dropped = views._mark_retiring(None, ["page_views"])
    assert dropped == ["abandoned"] and stores.store.value.retiring == ("abandoned",)
    batch.delete_retiring(None)  # the restart has not replaced the marker yet
    assert stores.deleted == [] and stores.store.value.retiring == ()
    stores.markers = [marker("page_views")]  # the speed layer maintains what the apply declared
    views._retire(None, ["page_views"], dropped)
    assert stores.deleted == [["abandoned"]] and stores.store.value.retiring == ()


@pytest.mark.parametrize(
    ("start", "rows_left", "retained"),
    [
        (RETIRED, False, True),
        (RETIRED, True, False),
        (Pointer({"page_views": ViewEntry("pv_1", 1, 60_000)}), False, False),
    ],
    ids=["retired", "retired-rows-left", "nothing-retiring"],
)
def test_clean_realtime_drops_the_tables_of_views_it_finished_retiring(
    stores, monkeypatch, capsys, start, rows_left, retained
):
    """A view removed by `views apply` whose realtime rows were left (exit 5) loses them at a later
    `lambdactl clean-realtime`; its batch tables go then too, not at the next batch run's retention.
    Not while its rows are left (it stays retiring: its newest table is kept), nor when nothing was
    retiring (the batch run's own swap ran retention)."""
    import batch_layer.swap
    from lambdactl import replay_orphans
    from lambdactl.replay_orphans import Orphans
    from stores import realtime_cleanup
    from stores.realtime_cleanup import Cleanup
    from stores.realtime_scan import Unreadable

    stores.store = OneStore(start)
    stores.store.record_run = lambda version, **fields: None
    stores.markers, stores.marks = [marker("page_views")], [{}]
    calls: list = []

    def delete_absorbed(settings, cutoffs, timestamp_us=None):
        calls.append(sorted(cutoffs))
        broken = rows_left and "old" in cutoffs
        return Cleanup(0, unreadable=[Unreadable("speed_by_key", 0, 1, "timed out")] if broken else [])

    kept: list = []

    def retain_quietly(settings, store, when):
        kept.append(store)
        return ["old_v1"]

    monkeypatch.setattr(realtime_cleanup, "delete_absorbed", delete_absorbed)
    monkeypatch.setattr(replay_orphans, "delete_orphaned_replays", lambda settings, seen: Orphans())
    monkeypatch.setattr(batch_layer.swap, "retain_quietly", retain_quietly)
    status = batch.cmd_clean_realtime(None, SimpleNamespace(json=True))
    assert status == (batch.CLEANUP_LEFT if rows_left else 0)
    assert kept == ([stores.store] if retained else [])
    emitted = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert emitted["dropped_tables"] == (["old_v1"] if retained else [])


def test_a_name_declared_again_leaves_the_list_only_after_the_settle_wait(stores):
    """A view removed by an apply killed during its wait, then declared again by a second apply: the
    speed layer maintains it again, so its rows stay, but its old batch table is protected only while
    the name is retiring (stores.pointer.retention_plan). Taken off the list at once, the next
    retention could drop that table under an answer that read the pointer before the removal."""
    stores.markers, stores.marks = [marker("page_views", "old")], [{}]
    batch.delete_retiring(None)
    assert stores.settled == 1, "taken off the list only once no answer can still read its table"
    assert stores.deleted == [] and stores.store.value.retiring == ()
