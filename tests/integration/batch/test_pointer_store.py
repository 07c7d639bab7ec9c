"""The pointer in the real HBase: compare-and-set and retention.

Each test works on a meta table of its own and on views whose names only it uses, so neither the
platform's pointer nor its tables are touched (retention only considers the views its own runs
wrote). Runs are recorded as the batch job records them, with small tables of their own; the swaps
go through `swap_version`, as `lambdactl batch --swap` does."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import happybase
import psutil
import pytest

from batch_layer.job import swap_version, verify_version
from batch_layer.swap import MarkerUnavailable
from stores.batch_views import PointerMoved, VersionStore
from stores.batch_writer import VerificationError, create_table
from stores.checkpoints import marker_path, write_marker
from stores.clients import hbase_connection
from stores.pointer import DOC, HAS_DOC, Pointer, table_name
from stores.pointer_moves import advance, retiring_done, retiring_marked, run_basis

T0 = 1_800_000_000_000
STEP = 60_000


@pytest.fixture
def own(settings, stack, unique):
    """Settings with a meta table of this test's own (keep_versions=2) and three view names."""
    mine = settings.model_copy(
        update={
            "hbase": settings.hbase.model_copy(update={"meta_table": f"meta_t{unique}"}),
            "batch": settings.batch.model_copy(update={"keep_versions": 2}),
        }
    )
    conn = hbase_connection(mine)
    try:
        conn.create_table(mine.hbase.meta_table, {"p": dict(max_versions=1)})
    finally:
        conn.close()
    views = [f"t{unique}{x}" for x in "abc"]
    yield mine, views
    conn = hbase_connection(mine)
    try:
        for raw in conn.tables():
            if raw.decode() == mine.hbase.meta_table or raw.decode().startswith(f"t{unique}"):
                conn.delete_table(raw.decode(), disable=True)
    finally:
        conn.close()


def tables(settings) -> set[str]:
    conn = hbase_connection(settings)
    try:
        return {t.decode() for t in conn.tables()}
    finally:
        conn.close()


def pointer_row(settings) -> dict:
    conn = hbase_connection(settings)
    try:
        return conn.table(settings.hbase.meta_table).row(b"pointer")
    finally:
        conn.close()


def written(settings, views: list[str], cutoff_ms: int, full: bool = False, **extra) -> int:
    """A run as the batch job leaves it before the swap: planned against the pointer as it is now,
    tables written, state "verified"."""
    store = VersionStore(settings)
    current = store.pointer()
    version = store.allocate_version()
    for view in views:
        create_table(settings, table_name(view, version))
    fields = dict(
        state="verified",
        run_id=f"run-{version}",
        cutoff_ms=cutoff_ms,
        started_ms=int(time.time() * 1000),
        views=views,
        full=full,
        based_on=current.generation if current else 0,
        basis=run_basis(current, views, full),
        stats={"events": version, "tables": {v: {"rows": 0, "cells": 0, "checksum": 0} for v in views}},
    )
    fields.update(extra)
    store.record_run(version, **fields)
    return version


def test_of_two_runs_that_read_the_same_pointer_the_second_to_swap_fails_and_changes_nothing(own):
    settings, (a, b, c) = own
    store = VersionStore(settings)
    first = written(settings, [a, b, c], T0, full=True)
    swap_version(settings, first)
    manual = written(settings, [a], T0 + STEP)  # a manual run and a DAG run of one view read generation 1 ...
    dag = written(settings, [a], T0 + 2 * STEP)
    swap_version(settings, manual)  # ... the manual run swaps first
    before = pointer_row(settings)
    with pytest.raises(PointerMoved, match="the pointer moved since this run read it") as lost:
        swap_version(settings, dag)
    assert "generation 1" in str(lost.value) and "generation 2" in str(lost.value)
    assert pointer_row(settings) == before, "the losing swap changed nothing"
    assert store.runs()[dag]["state"] == "verified"
    assert table_name(a, dag) in tables(settings), "a run in flight keeps its tables"
    pointer = store.pointer()
    assert (pointer.entry(a).version, pointer.entry(b).version, pointer.entry(c).version) == (manual, first, first)
    assert (pointer.cutoff_of(a), pointer.cutoff_of(b)) == (T0 + STEP, T0)

    # The same through the command line the DAG's swap task calls: exit 2, the reason on stderr.
    again = written(settings, [c], T0 + 2 * STEP)
    swap_version(settings, written(settings, [c], T0 + 3 * STEP))
    before = pointer_row(settings)
    env = dict(
        os.environ,
        LAMBDA_HBASE__META_TABLE=settings.hbase.meta_table,
        LAMBDA_INGEST_BUCKET_S=str(settings.ingest_bucket_s),
    )
    done = subprocess.run(
        [sys.executable, "-m", "lambdactl.cli", "batch", "--swap", str(again)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 2 and "the pointer moved since this run read it" in done.stderr, done.stderr[-2000:]
    assert pointer_row(settings) == before


def test_a_full_run_leaves_the_entry_of_a_view_the_speed_layer_still_maintains(own):
    """A view dropped from its module but not applied yet (or put back before an apply) is still
    maintained by the speed layer and answered by the API: a full run (the DAG's) that no longer
    computes it keeps its entry, so its answers keep their batch part. Once the speed layer stops
    maintaining it, a full run retires it as before."""
    from stores.webhdfs import WebHdfs

    settings, (a, b, c) = own
    speed = settings.speed.model_copy(update={"checkpoint_dir": f"/lambda/test/pointer-{a}"})
    mine = settings.model_copy(update={"speed": speed})
    first = written(mine, [a, b, c], T0, full=True)
    swap_version(mine, first)
    try:
        write_marker(mine, views={a: 0, b: 0, c: 0}, dedupe=None, cells=None)
        kept = swap_version(mine, written(mine, [a, b], T0 + STEP, full=True))  # c left its module
        assert kept.entry(c) is not None and kept.entry(c).version == first, "c still answers from its batch table"
        assert c not in kept.retiring and kept.cutoff_of(a) == T0 + STEP
        write_marker(
            mine, views={a: 0, b: 0}, dedupe=None, cells=None
        )  # `lambdactl views apply`: the speed layer stopped maintaining c
        dropped = swap_version(mine, written(mine, [a, b], T0 + 2 * STEP, full=True))
        assert dropped.entry(c) is None and c in dropped.retiring
    finally:
        with WebHdfs(mine) as fs:
            fs.delete(marker_path(mine))


def test_a_full_runs_swap_refuses_clearly_when_the_speed_layers_marker_cannot_be_read(own):
    """Which entries a full run keeps depends on the marker: with HDFS unreachable the swap fails,
    saying why, and the pointer does not move (a failure that may pass, not a refusal: the DAG's
    retry swaps once HDFS answers)."""
    settings, (a, b, c) = own
    swap_version(settings, written(settings, [a, b, c], T0, full=True))
    version = written(settings, [a, b], T0 + STEP, full=True)
    before = pointer_row(settings)
    unreachable = settings.model_copy(
        update={"hdfs": settings.hdfs.model_copy(update={"webhdfs_urls": ["http://127.0.0.1:9"]})}
    )
    with pytest.raises(MarkerUnavailable, match="marker cannot be read.*nothing was changed"):
        swap_version(unreachable, version)
    assert pointer_row(settings) == before
    assert VersionStore(settings).runs()[version]["state"] == "verified"


def compare_and_set_only(store: VersionStore, version: int):
    """The first half of VersionStore.swap for a verified run: its entries moved by compare-and-set,
    the run not recorded (the swap's process died there); the pointer written."""
    current = store.pointer()
    run = store.runs()[version]
    moved = advance(
        current,
        version=version,
        run_id=run["run_id"],
        cutoff_ms=run["cutoff_ms"],
        views=run["views"],
        full=False,
        stats=run["stats"],
        now_ms=int(time.time() * 1000),
    )
    store.compare_and_set(current, moved)
    return moved


def test_a_swap_stopped_after_its_compare_and_set_completes_when_run_again(own):
    """The swap task killed after the pointer moved and before its run was recorded as live: run
    again (Airflow's retry), the swap sees its own move and finishes, instead of failing with
    "the pointer moved"."""
    settings, (a, b, c) = own
    store = VersionStore(settings)
    swap_version(settings, written(settings, [a, b], T0, full=True))
    version = written(settings, [a], T0 + STEP)
    moved = compare_and_set_only(store, version)  # the process died after it
    assert store.runs()[version]["state"] == "verified"
    again = swap_version(settings, version)
    assert again.entry(a).version == version and again.generation == moved.generation, "the pointer did not move again"
    assert store.runs()[version]["state"] == "live"


def test_a_swap_completed_after_a_crash_retires_the_versions_it_replaced(own):
    """As an uninterrupted swap does: the version the crashed swap replaced in full is recorded
    retired, the one it replaced in part stays live."""
    settings, (a, b, c) = own
    store = VersionStore(settings)
    first = written(settings, [a, b], T0, full=True)
    swap_version(settings, first)
    only_c = written(settings, [c], T0)
    swap_version(settings, only_c)
    version = written(settings, [c], T0 + STEP)
    compare_and_set_only(store, version)
    swap_version(settings, version)
    runs = store.runs()
    assert (runs[version]["state"], runs[only_c]["state"], runs[first]["state"]) == ("live", "retired", "live")


def test_a_run_swaps_after_moves_that_left_its_views_as_it_read_them(own):
    """Another view's swap and clean-up bookkeeping (what `clean-realtime` and `views apply` move)
    while a run computes: its swap goes on, its work is not lost. A full run planned before another
    view's swap is still refused: its swap would drop what that run wrote."""
    from lambdactl.batch import move_pointer

    settings, (a, b, c) = own
    store = VersionStore(settings)
    first = written(settings, [a, b, c], T0, full=True)
    swap_version(settings, first)
    mine = written(settings, [b], T0 + 2 * STEP)  # planned against generation 1
    whole = written(settings, [a, b, c], T0 + 2 * STEP, full=True)
    other = written(settings, [a], T0 + STEP)
    swap_version(settings, other)
    now = int(time.time() * 1000)
    assert move_pointer(store, lambda p: retiring_marked(p, [f"{c}_old"], now)) is not None
    assert move_pointer(store, lambda p: retiring_done(p, [f"{c}_old"], now)) is not None
    pointer = swap_version(settings, mine)
    assert pointer.generation == 5
    assert (pointer.entry(a).version, pointer.entry(b).version, pointer.entry(c).version) == (other, mine, first)
    assert pointer.cutoff_of(b) == T0 + 2 * STEP and pointer.retiring == ()
    before = pointer_row(settings)
    with pytest.raises(PointerMoved, match="the pointer moved since this run read it"):
        swap_version(settings, whole)
    assert pointer_row(settings) == before


def test_racing_writers_one_wins_the_compare_and_set(own):
    settings, (a, b, _) = own
    store = VersionStore(settings)
    swap_version(settings, written(settings, [a, b], T0, full=True))
    for round_ in range(5):
        current = store.pointer()
        writers = 8
        barrier = threading.Barrier(writers)
        outcomes: list = [None] * writers

        def write(i: int, current=current, round_=round_, barrier=barrier, outcomes=outcomes) -> None:
            new = advance(
                current,
                version=1_000 * (round_ + 1) + i,
                run_id=f"w{i}",
                cutoff_ms=T0 + (round_ + 1) * STEP,
                views=[a],
                full=False,
                stats={},
                now_ms=int(time.time() * 1000),
            )
            barrier.wait()
            try:
                store.compare_and_set(current, new)
                outcomes[i] = new
            except PointerMoved as exc:
                outcomes[i] = exc

        threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        winners = [o for o in outcomes if isinstance(o, Pointer)]
        assert len(winners) == 1, outcomes
        assert all(isinstance(o, PointerMoved) for o in outcomes if o is not winners[0])
        assert store.pointer() == winners[0]
        assert store.pointer().generation == current.generation + 1


def test_a_pointer_row_of_the_single_cutoff_format_is_read_and_moved_once(own):
    settings, (a, b, _) = own
    store = VersionStore(settings)
    old = written(settings, [a, b], T0, state="live")
    legacy = Pointer.from_doc(
        advance(None, version=old, run_id="old", cutoff_ms=T0, views=[a, b], full=True, stats={}, now_ms=T0).to_doc()
    ).legacy_columns()
    del legacy[HAS_DOC]  # the single-cutoff code wrote no such column
    conn = hbase_connection(settings)
    try:
        conn.table(settings.hbase.meta_table).put(b"pointer", legacy)  # as the single-cutoff code wrote it
    finally:
        conn.close()
    read = store.pointer()
    assert read.generation == 0 and read.stored is None
    assert read.cutoff_of(a) == read.cutoff_of(b) == T0 and read.entry(a).version == old
    one, two = written(settings, [a], T0 + STEP), written(settings, [a], T0 + STEP)
    swap_version(settings, one)
    with pytest.raises(PointerMoved):
        swap_version(settings, two)
    row = pointer_row(settings)
    assert DOC in row
    moved = store.pointer()
    assert (moved.entry(a).version, moved.entry(b).version) == (one, old)
    assert (moved.cutoff_of(a), moved.cutoff_of(b)) == (T0 + STEP, T0)


def test_retention_beyond_k_versions_with_partial_runs_keeps_every_named_table(own):
    settings, (a, b, c) = own
    store = VersionStore(settings)
    full = written(settings, [a, b, c], T0, full=True)
    swap_version(settings, full)
    partial_a = []
    for i in range(1, 6):  # five runs of view a alone: more than keep_versions (2)
        partial_a.append(written(settings, [a], T0 + i * STEP))
        swap_version(settings, partial_a[-1])
        pointer = store.pointer()
        assert pointer.tables() <= tables(settings), f"after run {i} of {a}, a table the pointer names is gone"
    b_run = written(settings, [b], T0 + 6 * STEP)
    swap_version(settings, b_run)
    present = tables(settings)
    pointer = store.pointer()
    assert pointer.tables() <= present
    assert {table_name(a, v) for v in partial_a[-2:]} <= present, f"{a}: its 2 newest versions stay"
    assert not {table_name(a, v) for v in [full, *partial_a[:-2]]} & present, f"{a}: older versions are dropped"
    assert {table_name(b, b_run), table_name(b, full)} <= present, f"{b}: the serving and the previous version"
    assert table_name(c, full) in present, f"{c} still serves from the first run, five versions later"
    runs = store.runs()
    assert runs[full]["state"] == "live" and runs[partial_a[0]]["state"] == "dropped"

    # A run still writing keeps its tables; one whose process is gone, or that failed, does not.
    me = psutil.Process()
    alive = written(
        settings,
        [a],
        T0 + 7 * STEP,
        state="writing",
        host=socket.gethostname(),
        pid=me.pid,
        pid_started_ms=int(me.create_time() * 1000),
    )
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = written(
        settings,
        [a],
        T0 + 7 * STEP,
        state="writing",
        host=socket.gethostname(),
        pid=gone.pid,
        pid_started_ms=int(time.time() * 1000) - 10_000,
    )
    long_running = written(  # writing for longer than batch.retention_grace_s, its process still here
        settings,
        [b],
        T0 + 7 * STEP,
        state="writing",
        host=socket.gethostname(),
        pid=me.pid,
        pid_started_ms=int(me.create_time() * 1000),
        started_ms=int(time.time() * 1000) - 2 * settings.batch.retention_grace_s * 1000,
    )
    failed = written(settings, [b], T0 + 7 * STEP, state="failed")
    stale = written(settings, [c], T0 + 7 * STEP, started_ms=int(time.time() * 1000) - 2 * 3_600_000)
    dropped = store.retain(settings.batch.keep_versions)
    assert table_name(a, alive) not in dropped and table_name(a, alive) in tables(settings)
    assert table_name(b, long_running) in tables(settings), "a run still writing keeps its tables however long"
    with pytest.raises(VerificationError, match="dropped"):  # verified too long ago: its tables went
        swap_version(settings, stale)
    with pytest.raises(VerificationError, match="dropped"):  # the DAG's verify task says so too
        verify_version(settings, stale)
    # Verified long ago, its tables not dropped yet: refused too, as retention may drop them mid-swap.
    long_ago = int(time.time() * 1000) - 2 * settings.batch.retention_grace_s * 1000
    late = written(settings, [c], T0 + 8 * STEP, started_ms=long_ago, verified_ms=long_ago)
    with pytest.raises(VerificationError, match="retention may have dropped its tables"):
        swap_version(settings, late)
    assert store.pointer().tables() <= tables(settings), "the refused swap names no dropped table"
    assert {table_name(a, dead), table_name(b, failed), table_name(c, stale)} <= set(dropped)
    assert store.pointer().tables() <= tables(settings)


def test_a_table_another_swap_dropped_first_does_not_fail_this_swap(own, monkeypatch):
    """Two swaps at once (the DAG's and a manual partial run) plan to drop the same old tables; the
    one that finds a table already gone goes on, and its swap, done already, succeeds."""
    settings, (a, b, _) = own
    store = VersionStore(settings)
    runs = []
    for i in range(3):
        runs.append(written(settings, [a, b], T0 + i * STEP, full=True))
        swap_version(settings, runs[-1])
    newest = written(settings, [a, b], T0 + 4 * STEP)
    listed = VersionStore.tables

    def listed_then_dropped_by_another(self):
        names = listed(self)
        conn = hbase_connection(settings)
        try:
            conn.delete_table(table_name(a, runs[1]), disable=True)  # the other swap's retention, first
        finally:
            conn.close()
        return names

    monkeypatch.setattr(VersionStore, "tables", listed_then_dropped_by_another)
    pointer = swap_version(settings, newest)
    monkeypatch.undo()
    assert pointer.entry(a).version == newest and store.pointer() == pointer
    assert table_name(a, runs[1]) not in tables(settings)
    assert table_name(b, runs[1]) not in tables(settings), "the other table it planned to drop went too"
    assert store.runs()[runs[1]]["state"] == "dropped"


def test_the_realtime_clean_up_is_recorded_for_the_reports(own):
    """A report compares the window's realtime rows with the batch; once the clean-up deleted them,
    every batch cell read as counted by one layer only: a false alarm, reported as not ok. The
    clean-up records below what it deletes, per view, so a report leaves those cells out."""
    import argparse

    from definitions.views import View
    from lambdactl.batch import cmd_clean_realtime
    from reports.build import NoWindow, check_not_cleaned, cleaned_below_s, window_for_version

    settings, (a, b, _) = own
    settings = settings.model_copy(update={"batch": settings.batch.model_copy(update={"cleanup_settle_s": 0})})
    store = VersionStore(settings)
    first = written(settings, [a, b], T0, full=True)
    swap_version(settings, first)
    second = written(settings, [a], T0 + STEP)
    swap_version(settings, second)
    assert cleaned_below_s(store.runs()) == {}
    assert cmd_clean_realtime(settings, argparse.Namespace(json=False)) == 0
    assert cleaned_below_s(store.runs()) == {a: (T0 + STEP) // 1000, b: T0 // 1000}
    window = window_for_version(settings, second)  # [T0, T0 + STEP): a's rows there are gone, b's kept
    views = [View(n, keys=("url",), aggregation="count") for n in (a, b)]
    check_not_cleaned(views, cleaned_below_s(store.runs()), window.start_ms, window.end_ms)
    with pytest.raises(NoWindow, match="realtime clean-up was started on the rows"):
        check_not_cleaned(views[:1], cleaned_below_s(store.runs()), window.start_ms, window.end_ms)
    third = written(settings, [a, b], T0 + 3 * STEP, full=True)
    swap_version(settings, third)
    assert cmd_clean_realtime(settings, argparse.Namespace(json=False)) == 0
    assert cleaned_below_s(store.runs()) == dict.fromkeys([a, b], (T0 + 3 * STEP) // 1000), "the highest per view"


def test_clean_realtime_drops_the_tables_of_a_view_it_finished_retiring(own):
    """A view removed by `views apply` whose realtime rows were left for a later clean-up keeps its
    newest table while it is retiring. `lambdactl clean-realtime`, once it deleted those rows and took
    the name off the list, drops its tables then, not at the next batch run; the other view's stay."""
    import argparse

    from lambdactl.batch import cmd_clean_realtime
    from stores.pointer_moves import retire

    settings, (a, b, _) = own
    settings = settings.model_copy(update={"batch": settings.batch.model_copy(update={"cleanup_settle_s": 0})})
    store = VersionStore(settings)
    first = written(settings, [a, b], T0, full=True)
    swap_version(settings, first)
    current = store.pointer()
    store.swap(current, retire(current, [b], int(time.time() * 1000)))
    store.retain(settings.batch.keep_versions)  # a batch run's retention while b is retiring
    assert table_name(b, first) in tables(settings), "kept while an answer may still read it"
    assert cmd_clean_realtime(settings, argparse.Namespace(json=False)) == 0
    assert store.pointer().retiring == ()
    assert table_name(b, first) not in tables(settings)
    assert table_name(a, first) in tables(settings)


def test_a_stray_row_among_the_runs_is_passed_over_not_fatal(own):
    """A row `run:x` (or one whose values are not JSON) written into the meta table by anything but the
    platform failed every swap and every retention pass with a bare ValueError."""
    settings, _views = own
    store = VersionStore(settings)
    store.record_run(7, state="verified", cutoff_ms=T0)
    conn = hbase_connection(settings)
    try:
        meta = conn.table(settings.hbase.meta_table)
        meta.put(b"run:x", {b"p:state": b'"live"'})
        meta.put(b"run:0000000008", {b"p:state": b"not json"})
    finally:
        conn.close()
    assert store.runs() == {7: {"state": "verified", "cutoff_ms": T0}}
    assert store.retain(settings.batch.keep_versions) == []


def test_retention_does_not_mark_the_serving_run_dropped_when_its_table_was_deleted_outside(own):
    """A served table deleted by hand: retention recorded its run "dropped" while the pointer still
    named it, and every later swap of it was refused ("its run is dropped")."""
    settings, views = own
    version = written(settings, views[:1], T0)
    swap_version(settings, version)
    conn = hbase_connection(settings)
    try:
        conn.delete_table(table_name(views[0], version), disable=True)
    finally:
        conn.close()
    store = VersionStore(settings)
    store.retain(settings.batch.keep_versions)
    assert store.runs()[version]["state"] == "live", "the pointer still names it"


def test_retention_deletes_the_old_run_records_nothing_needs(own, monkeypatch):
    """The meta table kept every run's record for ever, and every swap, verification, retention pass
    and report reads them all: an hourly schedule slowed each by a year's worth of rows. Retention
    keeps the newest `batch.keep_runs`, and older ones only while they matter."""
    settings, (a, b, _) = own
    settings = settings.model_copy(update={"batch": settings.batch.model_copy(update={"keep_runs": 20})})
    store = VersionStore(settings)
    serving = written(settings, [a, b], T0, full=True)
    swap_version(settings, serving)  # named by the pointer: kept however many runs come after it
    ended = []
    for i in range(30):
        version = store.allocate_version()
        state = "dropped" if i % 2 else "failed"
        store.record_run(version, state=state, cutoff_ms=T0, previous_cutoff_ms=T0, views=[a])
        ended.append(version)
    store.record_run(ended[0], realtime_cleaned_s={a: 5})  # a's highest clean-up mark: the reports read it
    with_table = ended[1]
    left = table_name(a, with_table)  # a table of its run left: its drop fails this pass
    create_table(settings, left)
    create_table(settings, table_name(f"{a}x", ended[3]))  # a table of no view its runs name: not its
    real_delete = happybase.Connection.delete_table

    def failing(self, name, disable=False):
        if name == left:
            raise OSError("HBase did not answer")
        return real_delete(self, name, disable)

    monkeypatch.setattr(happybase.Connection, "delete_table", failing)
    assert store.retain(settings.batch.keep_versions) == []
    monkeypatch.undo()
    kept = set(store.runs())
    assert kept == {serving, ended[0], with_table, *ended[-20:]}, sorted(set(ended) - kept)
    assert store.retain(settings.batch.keep_versions) == [left]  # dropped now, and its record goes
    assert set(store.runs()) == kept - {with_table}


def test_two_attempts_at_one_swap_both_end_with_it_serving(own, monkeypatch):
    """A retried swap task beside the attempt it replaced (or `lambdactl batch --swap N` beside the
    DAG's): the one that read the pointer before the other's compare-and-set landed failed with
    "the pointer moved ... nothing was changed; run the batch again" although its version served."""
    settings, (a, _b, _c) = own
    store = VersionStore(settings)
    swap_version(settings, written(settings, [a], T0, full=True))
    version = written(settings, [a], T0 + STEP)
    before = store.pointer()
    landed = swap_version(settings, version)  # the other attempt, first to land
    real_runs, real_pointer = VersionStore.runs, VersionStore.pointer
    # This attempt read the run record and the pointer before that one landed.
    monkeypatch.setattr(
        VersionStore,
        "runs",
        lambda self: {**real_runs(self), version: {**real_runs(self)[version], "state": "verified"}},
    )
    reads = iter([before])
    monkeypatch.setattr(VersionStore, "pointer", lambda self: next(reads, None) or real_pointer(self))
    assert swap_version(settings, version) == landed
    monkeypatch.undo()
    assert store.runs()[version]["state"] == "live"


def test_a_run_records_only_while_its_record_says_what_it_expects(own):
    """Retention gives up a run of another host silent past the grace, dropping its tables and its
    record: had it been running still, its next beat or its "verified" brought the record back half
    made (a state-less row no retention pass ever deleted). Against the real HBase checkAndPut."""
    settings, _ = own
    store = VersionStore(settings)
    version = store.allocate_version()
    store.record_run(version, state="writing", run_id="r", started_ms=1)
    assert store.record_run_if(version, "writing", heartbeat_ms=5)
    assert store.record_run_if(version, "writing", state="verified", verified_ms=7, stats={"events": 3})
    assert store.runs()[version] == {
        "state": "verified",
        "run_id": "r",
        "started_ms": 1,
        "heartbeat_ms": 5,
        "verified_ms": 7,
        "stats": {"events": 3},
    }
    assert not store.record_run_if(version, "writing", heartbeat_ms=9), "no longer writing"
    assert store.runs()[version]["heartbeat_ms"] == 5
    store._prune_runs([version])  # given up: deleted
    assert not store.record_run_if(version, "verified", heartbeat_ms=11)
    assert not store.record_run_if(version, "writing", state="verified", verified_ms=12)
    assert version not in store.runs(), "nothing came back"


def test_retention_never_drops_another_meta_table_s_tables_sharing_the_namespace(own):
    """Two stores (two meta tables, say staging beside production) in one namespace with the same view
    names: each one's retention dropped every `<view>_v<N>` of those views, the other's served
    tables included. Now each drops only tables its own runs made."""
    settings, (a, b, c) = own
    other = settings.model_copy(
        update={"hbase": settings.hbase.model_copy(update={"meta_table": f"{settings.hbase.meta_table}_other"})}
    )
    conn = hbase_connection(other)
    try:
        conn.create_table(other.hbase.meta_table, {"p": dict(max_versions=1)})
    finally:
        conn.close()
    try:
        theirs = []
        for i in range(2):  # versions 1 and 2 of the other store, the second serving
            theirs.append(written(other, [a, b], T0 + i * STEP, full=True))
            swap_version(other, theirs[-1])
        their_tables = {table_name(view, v) for v in theirs for view in (a, b)}
        for _ in range(2):  # this store's counter gives versions 1 and 2 too: of another view
            written(settings, [c], T0 + STEP)
        mine = written(settings, [a, c], T0 + 2 * STEP, full=True)  # version 3: of their view a as well
        swap_version(settings, mine)
        VersionStore(settings).retain(keep=1, grace_ms=0)
        assert their_tables <= tables(settings), "the other store's tables, served ones included, all stay"
        assert VersionStore(other).pointer().tables() <= tables(settings)
    finally:
        conn = hbase_connection(other)
        try:
            conn.delete_table(other.hbase.meta_table, disable=True)
        finally:
            conn.close()


def test_retention_that_fails_after_dropping_a_table_still_names_it(own, monkeypatch):
    """HBase failing after a table was dropped (recording its run as dropped): the pass reported no
    table dropped, so `lambdactl clean-realtime --json` and `views apply` under-reported."""
    from batch_layer.swap import retain_quietly

    settings, (a, b, _) = own
    store = VersionStore(settings)
    swap_version(settings, written(settings, [a, b], T0, full=True))
    version = store.allocate_version()
    store.record_run(version, state="failed", cutoff_ms=T0, previous_cutoff_ms=T0, views=[a])
    old = table_name(a, version)
    create_table(settings, old)

    def hbase_away(*args, **kwargs):
        raise OSError("HBase did not answer")

    monkeypatch.setattr(VersionStore, "record_run", hbase_away)
    monkeypatch.setattr(VersionStore, "_prune_runs", hbase_away)
    assert retain_quietly(settings, store, "in a test") == [old]
    assert old not in tables(settings)
