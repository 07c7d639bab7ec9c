"""A verified run swaps only while retention (in any process) still keeps its tables: the grace is
checked right before the compare-and-set. It was checked before the speed layer's marker was read
(WebHDFS, 10 s per endpoint tried), so a slow read near the end of the grace let the pointer name
tables retention had dropped meanwhile. No service: the version store is a stand-in."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from batch_layer import job, swap
from stores.batch_writer import VerificationError


def verified_run(**extra) -> dict:
    """The record of run 5: written and verified at time 0, not swapped yet."""
    return {
        "state": "verified",
        "views": ["page_views"],
        "full": True,
        "cutoff_ms": 60_000,
        "run_id": "run-5",
        "based_on": 0,
        "started_ms": 0,
        "verified_ms": 0,
        "stats": {"events": 1, "tables": {}},
        **extra,
    }


def test_the_grace_is_checked_after_the_slow_reads_right_before_the_swap(settings, monkeypatch):
    clock = {"ms": 0}
    monkeypatch.setattr(swap, "time", SimpleNamespace(time=lambda: clock["ms"] / 1000))
    swaps: list = []
    run = verified_run()
    store = SimpleNamespace(runs=lambda: {5: run}, pointer=lambda: None, swap=lambda *a: swaps.append(a))
    monkeypatch.setattr(swap, "version_store", lambda s: store)
    monkeypatch.setattr(swap, "tables_kept", lambda *a: None)
    monkeypatch.setattr(swap, "check_unmoved", lambda *a: None)

    def slow_marker_read(s):  # the grace runs out while the marker is read
        clock["ms"] += settings.batch.retention_grace_s * 1000
        return ["page_views"]

    monkeypatch.setattr(swap, "_speed_layer_maintains", slow_marker_read)
    with pytest.raises(VerificationError, match="retention may have dropped its tables"):
        swap.swap_version(settings, 5)
    assert swaps == [], "nothing swapped"


def test_a_swap_beats_its_run_before_the_compare_and_set(settings, monkeypatch):
    """Checked only, a compare-and-set that stalled past the grace (a slow HBase, a paused process)
    let retention elsewhere drop the tables the pointer was then moved to. A beat that itself took
    longer than the margin left is refused."""
    clock = {"ms": 0}
    monkeypatch.setattr(swap, "time", SimpleNamespace(time=lambda: clock["ms"] / 1000))
    run = verified_run()
    sent: list = []

    def record_run_if(version, expected, **fields):
        sent.append(("beat", fields["heartbeat_ms"]))
        clock["ms"] += stall["ms"]
        return True

    stall = {"ms": 1_000}
    store = SimpleNamespace(
        runs=lambda: {5: run}, pointer=lambda: None, swap=lambda *a: sent.append(("swap",)), record_run_if=record_run_if
    )
    monkeypatch.setattr(swap, "version_store", lambda s: store)
    monkeypatch.setattr(swap, "tables_kept", lambda *a: None)
    monkeypatch.setattr(swap, "check_unmoved", lambda *a: None)
    monkeypatch.setattr(swap, "_speed_layer_maintains", lambda s: ["page_views"])
    monkeypatch.setattr(swap, "_retain", lambda *a: None)
    swap.swap_version(settings, 5)
    assert sent == [("beat", 0), ("swap",)]
    sent.clear()
    stall["ms"] = swap.SWAP_MARGIN_MS + 1
    with pytest.raises(VerificationError, match="last beat before its swap took over"):
        swap.swap_version(settings, 5)
    assert sent == [("beat", 1_000)], "nothing swapped"


def test_a_swap_whose_run_is_no_longer_verified_at_its_last_beat_is_refused(settings, monkeypatch):
    """Retention gave the run up (its record dropped) between the first checks and the beat."""
    monkeypatch.setattr(swap, "time", SimpleNamespace(time=lambda: 1.0))
    run = verified_run()
    store = SimpleNamespace(
        runs=lambda: {5: {**run, "state": "dropped"}} if gave_up else {5: run},
        pointer=lambda: None,
        swap=lambda *a: pytest.fail("swapped"),
        record_run_if=lambda *a, **k: False,
    )
    gave_up = False
    monkeypatch.setattr(swap, "version_store", lambda s: store)
    monkeypatch.setattr(swap, "tables_kept", lambda *a: None)
    monkeypatch.setattr(swap, "check_unmoved", lambda *a: None)

    def marker_read(s):
        nonlocal gave_up
        gave_up = True
        return ["page_views"]

    monkeypatch.setattr(swap, "_speed_layer_maintains", marker_read)
    with pytest.raises(VerificationError, match="no longer recorded verified \\(its record: dropped\\)"):
        swap.swap_version(settings, 5)
    # Another attempt swapped it meanwhile, and later runs replaced it since: overtaken, not given up.
    from stores.pointer import Overtaken

    store.runs = lambda: {5: {**run, "state": "retired"}} if gave_up else {5: run}
    gave_up = False
    with pytest.raises(Overtaken, match="served and was replaced since"):
        swap.swap_version(settings, 5)


def test_a_verify_scan_longer_than_the_grace_beats_and_the_swap_after_it_goes_ahead(settings, monkeypatch):
    """The DAG's verify task scans every table again (no counter, no beat): over a large history it
    outlasted batch.retention_grace_s, and the swap after it was refused on every run."""
    clock = {"ms": 0}
    for module in (job, swap):
        monkeypatch.setattr(module, "time", SimpleNamespace(time=lambda: clock["ms"] / 1000))
    grace_ms = settings.batch.retention_grace_s * 1000
    run = verified_run(stats={"tables": {"page_views": {"rows": 1, "cells": 1, "total": 1}}})
    beats: list[int] = []
    swaps: list = []

    def record_run_if(version, expected, **fields):
        assert expected == "verified" == run["state"]
        beats.append(fields["heartbeat_ms"])
        run.update(fields)
        return True

    store = SimpleNamespace(
        runs=lambda: {5: run}, pointer=lambda: None, swap=lambda *a: swaps.append(a), record_run_if=record_run_if
    )
    for module in (job, swap):
        monkeypatch.setattr(module, "version_store", lambda s: store)
        monkeypatch.setattr(module, "tables_kept", lambda *a: None)
    monkeypatch.setattr(swap, "check_unmoved", lambda *a: None)
    monkeypatch.setattr(job, "selected_views", lambda *a: [SimpleNamespace(name="page_views")])
    monkeypatch.setattr(job, "TableStats", lambda **kw: kw)
    monkeypatch.setattr(job, "beat_every_s", lambda grace_s: 0.01)
    scanned = []

    def long_scan(*args):  # the scan outlasts the grace; its beats keep the tables meanwhile
        clock["ms"] += 2 * grace_ms
        from tests.support.polling import wait_for

        wait_for(lambda: len(beats) >= 2, "a beat during the scan (after the first)", timeout_s=5, interval_s=0.01)
        scanned.append(args[1])

    monkeypatch.setattr(job, "verify_table", long_scan)
    monkeypatch.setattr(swap, "_speed_layer_maintains", lambda s: ["page_views"])
    monkeypatch.setattr(swap, "_retain", lambda *a: None)
    job.verify_version(settings, 5)
    assert beats[0] == 0, "a beat before the scan begins"
    assert scanned == ["page_views_v5"] and beats[-1] == 2 * grace_ms, "checked now: the grace runs from here"
    swap.swap_version(settings, 5)
    assert len(swaps) == 1

    clock["ms"] += 2 * grace_ms  # verified long ago, never swapped: not scanned again
    run["state"] = "verified"
    with pytest.raises(VerificationError, match="retention may have dropped its tables"):
        job.verify_version(settings, 5)


def test_a_retried_swap_whose_first_landed_before_a_partial_run_replaced_one_view_is_done(settings, monkeypatch):
    """Run 5's compare-and-set landed, its process died before recording it, and a manual run of
    one view swapped since: the DAG's retry said "Nothing was changed; run the batch again"."""
    from stores.pointer import Pointer, ViewEntry

    run = {"state": "verified", "views": ["page_views", "top_pages"], "run_id": "run-5", "cutoff_ms": 60_000}
    pointer = Pointer(
        {"page_views": ViewEntry("page_views_v6", 6, 120_000), "top_pages": ViewEntry("top_pages_v5", 5, 60_000)},
        version=6,
    )
    recorded: list = []
    store = SimpleNamespace(
        runs=lambda: {5: run, 4: {"state": "live", "views": ["page_views", "top_pages"]}},
        pointer=lambda: pointer,
        swap=lambda *a: pytest.fail("swapped again"),
        record_run=lambda version, **fields: recorded.append((version, fields.get("state"))),
    )
    monkeypatch.setattr(swap, "version_store", lambda s: store)
    monkeypatch.setattr(swap, "_retain", lambda *a: None)
    assert swap.swap_version(settings, 5) is pointer
    assert recorded == [(5, "live"), (4, "retired")]
    run["state"] = "live"  # and once recorded, a retry is done too
    assert swap.swap_version(settings, 5) is pointer


def test_a_run_loading_by_puts_still_removes_the_hfiles_a_killed_bulk_run_left(settings, monkeypatch):
    """The sweep ran only when this run loaded by bulk: once the load mode became puts, a killed
    bulk run's HFile folder (a whole view's cells) stayed for good."""
    from definitions import spark
    from stores import batch_bulk_load

    class Allocated(Exception):
        pass

    store = SimpleNamespace(pointer=lambda: None, allocate_version=lambda: (_ for _ in ()).throw(Allocated()))
    monkeypatch.setattr(job, "version_store", lambda s: store)
    monkeypatch.setattr(job, "selected_views", lambda *a: [SimpleNamespace(name="page_views")])
    monkeypatch.setattr(job, "choose_cutoff", lambda *a: 60_000)
    monkeypatch.setattr(batch_bulk_load, "chosen_load", lambda s: "puts")
    monkeypatch.setattr(spark, "spark_session", lambda *a, **k: pytest.fail("no session was given"))
    swept: list = []
    monkeypatch.setattr(batch_bulk_load, "sweep_leftovers", lambda s: swept.append(s) or [])
    with pytest.raises(Allocated):
        job.run_batch(settings, spark=object())
    assert swept == [settings]


def test_a_verify_of_a_version_the_pointer_names_is_no_swap_to_come_whatever_its_record(settings, monkeypatch):
    """Its swap landed and its process died before recording it: `--verify` long after is a check
    of tables the pointer keeps, not refused as past its grace."""
    from stores.pointer import Pointer, ViewEntry

    clock = {"ms": 10 * settings.batch.retention_grace_s * 1000}
    for module in (job, swap):
        monkeypatch.setattr(module, "time", SimpleNamespace(time=lambda: clock["ms"] / 1000))
    run = {
        "state": "verified",
        "views": ["page_views"],
        "started_ms": 0,
        "verified_ms": 0,
        "stats": {"tables": {"page_views": {"rows": 1, "cells": 1, "total": 1}}},
    }
    pointer = Pointer({"page_views": ViewEntry("page_views_v5", 5, 60_000)}, version=5)
    store = SimpleNamespace(
        runs=lambda: {5: run}, pointer=lambda: pointer, record_run_if=lambda *a, **k: pytest.fail("beat")
    )
    monkeypatch.setattr(job, "version_store", lambda s: store)
    monkeypatch.setattr(job, "tables_kept", lambda *a: None)
    monkeypatch.setattr(job, "selected_views", lambda *a: [SimpleNamespace(name="page_views")])
    monkeypatch.setattr(job, "TableStats", lambda **kw: kw)
    scanned: list = []
    monkeypatch.setattr(job, "verify_table", lambda *a: scanned.append(a[1]))
    job.verify_version(settings, 5)
    assert scanned == ["page_views_v5"]


def test_a_verified_run_without_its_figures_is_refused_naming_why(settings, monkeypatch):
    """A record said "verified" without its figures (a recompute killed between the two writes, by
    an earlier release): verifying it failed with a KeyError and a traceback, and swapping it
    served a version with no figures."""
    run = verified_run()
    del run["stats"]
    store = SimpleNamespace(runs=lambda: {5: run}, pointer=lambda: None, swap=lambda *a: pytest.fail("swapped"))
    monkeypatch.setattr(swap, "version_store", lambda s: store)
    with pytest.raises(VerificationError, match="no figures.*run the batch again"):
        swap.swap_version(settings, 5)
    monkeypatch.setattr(job, "version_store", lambda s: store)
    monkeypatch.setattr(job, "not_past_grace", lambda *a: None)
    monkeypatch.setattr(job, "beat_verified", lambda *a: pytest.fail("beat"))
    monkeypatch.setattr(job, "verify_table", lambda *a: pytest.fail("scanned"))
    with pytest.raises(VerificationError, match="no figures.*run the batch again"):
        job.verify_version(settings, 5)


def test_a_run_drops_the_tables_retention_would_before_it_writes_its_own(settings, monkeypatch):
    """Retention ran only after a swap: while every run failed or was refused before its swap (HBase
    short of disk, say), each one left a full set of tables, and nothing dropped them."""
    from definitions import spark
    from stores import batch_bulk_load

    class Allocated(Exception):
        pass

    order: list = []
    store = SimpleNamespace(
        pointer=lambda: None,
        retain=lambda keep: order.append(("retain", keep)) or [],
        allocate_version=lambda: order.append("allocate") or (_ for _ in ()).throw(Allocated()),
    )
    monkeypatch.setattr(job, "version_store", lambda s: store)
    monkeypatch.setattr(job, "selected_views", lambda *a: [SimpleNamespace(name="page_views")])
    monkeypatch.setattr(job, "choose_cutoff", lambda *a: 60_000)
    monkeypatch.setattr(batch_bulk_load, "chosen_load", lambda s: "puts")
    monkeypatch.setattr(spark, "spark_session", lambda *a, **k: pytest.fail("no session was given"))
    monkeypatch.setattr(batch_bulk_load, "sweep_leftovers", lambda s: [])
    with pytest.raises(Allocated):
        job.run_batch(settings, spark=object())
    assert order == [("retain", settings.batch.keep_versions), "allocate"]

    def failing(keep):
        raise ConnectionError("HBase away")

    order.clear()
    store.retain = failing  # a failed retention never fails the run: the next one tries again
    with pytest.raises(Allocated):
        job.run_batch(settings, spark=object())
    assert order == ["allocate"]


def test_a_run_that_fails_with_hbase_away_too_raises_its_own_error(settings, monkeypatch):
    """Recording the run as failed met HBase down as well: its error replaced the run's own."""
    from contextlib import nullcontext

    from definitions import spark
    from stores import batch_bulk_load

    recorded: list = []

    def record_run_if(version, expected, **fields):
        assert fields.get("state") == "failed", "recorded verified"
        recorded.append(f"if {expected}: failed")
        raise ConnectionError("HBase away")

    store = SimpleNamespace(
        pointer=lambda: None,
        retain=lambda keep: [],
        allocate_version=lambda: 7,
        record_run=lambda version, state, **fields: recorded.append(state),
        record_run_if=record_run_if,
    )
    monkeypatch.setattr(job, "version_store", lambda s: store)
    monkeypatch.setattr(job, "selected_views", lambda *a: [SimpleNamespace(name="page_views")])
    monkeypatch.setattr(job, "choose_cutoff", lambda *a: 60_000)
    monkeypatch.setattr(job, "heartbeat", lambda *a: nullcontext())
    monkeypatch.setattr(batch_bulk_load, "chosen_load", lambda s: "puts")
    monkeypatch.setattr(spark, "spark_session", lambda *a, **k: pytest.fail("no session was given"))
    monkeypatch.setattr(batch_bulk_load, "sweep_leftovers", lambda s: [])

    def the_runs_own(*a):
        raise ValueError("the master dataset cannot be read")

    monkeypatch.setattr(job, "deduplicated_events", the_runs_own)
    with pytest.raises(ValueError, match="master dataset cannot be read"):
        job.run_batch(settings, spark=object())
    assert recorded == ["writing", "if writing: failed"]


def test_a_run_given_up_by_retention_records_nothing_more_and_fails(settings, monkeypatch):
    """Its record, deleted by retention (another host's run silent past the grace), came back half
    made at its next beat or its "verified"; now it fails, naming why, and writes nothing back."""
    from contextlib import nullcontext

    from stores import batch_bulk_load

    recorded: list = []
    store = SimpleNamespace(
        pointer=lambda: None,
        retain=lambda keep: [],
        allocate_version=lambda: 7,
        record_run=lambda version, state, **fields: recorded.append(state),
        record_run_if=lambda version, expected, **fields: recorded.append(f"if {expected}") or False,
    )
    monkeypatch.setattr(job, "version_store", lambda s: store)
    monkeypatch.setattr(job, "selected_views", lambda *a: [SimpleNamespace(name="page_views")])
    monkeypatch.setattr(job, "choose_cutoff", lambda *a: 60_000)
    monkeypatch.setattr(job, "heartbeat", lambda *a: nullcontext())
    monkeypatch.setattr(batch_bulk_load, "chosen_load", lambda s: "puts")
    monkeypatch.setattr(batch_bulk_load, "sweep_leftovers", lambda s: [])
    monkeypatch.setattr(job, "retain_before_writing", lambda *a: None)
    events = SimpleNamespace(cache=lambda: events, count=lambda: 3, unpersist=lambda: None)
    monkeypatch.setattr(job, "deduplicated_events", lambda *a: events)
    monkeypatch.setattr(job, "write_tables", lambda *a: ({}, {}))
    with pytest.raises(RuntimeError, match="retention gave it up"):
        job.run_batch(settings, spark=object())
    assert recorded == ["writing", "if writing", "if writing"], "nothing written back: no failed record half made"


def test_a_heartbeat_of_a_run_given_up_stops():
    import threading

    from batch_layer.heartbeat import heartbeat

    asked: list = []
    given_up = threading.Event()

    def record_run_if(version, expected, **fields):
        asked.append(expected)
        given_up.set()
        return False

    with heartbeat(SimpleNamespace(record_run_if=record_run_if), 7, every_s=0.01):
        assert given_up.wait(10)
        from tests.support.polling import wait_for

        wait_for(
            lambda: not any(t.name == "run-heartbeat" for t in threading.enumerate()),
            "the heartbeat to stop",
            timeout_s=5,
            interval_s=0.01,
        )
    assert asked == ["writing"]


def test_a_verified_run_another_process_swapped_meanwhile_needs_no_beat(settings, monkeypatch):
    run = {"state": "live"}
    store = SimpleNamespace(record_run_if=lambda *a, **k: False, runs=lambda: {5: run})
    swap.beat_verified(store, 5)  # swapped beside the scan: done
    run["state"] = "verified-then-pruned"
    store.runs = lambda: {}
    with pytest.raises(VerificationError, match="its record: gone"):
        swap.beat_verified(store, 5)


def test_a_swap_whose_compare_and_set_lost_to_a_move_that_left_its_views_is_made_on_the_new_pointer(
    settings, monkeypatch
):
    """A clean-up's bookkeeping (its retiring list) or another view's swap landing between the swap's
    read of the pointer and its compare-and-set failed the swap as a refusal (exit 2: the DAG's task
    failed at once), though neither changes what the run planned against. The pointer is read and
    judged again; a move that did change it is still refused."""
    from stores.batch_views import PointerMoved
    from stores.pointer import Pointer, ViewEntry

    monkeypatch.setattr(swap, "time", SimpleNamespace(time=lambda: 1.0))
    run = verified_run(full=False)  # a partial run: the other views' entries stay
    before = Pointer(entries={"clicks": ViewEntry("clicks_v3", 3, 30_000)}, version=3)
    after = Pointer(entries={"clicks": ViewEntry("clicks_v4", 4, 40_000)}, version=4)  # another view's swap
    reads = [before, after, after]
    swapped: list = []

    def compare_and_set(current, new):
        if current is not reads[-1]:
            raise PointerMoved("the pointer moved since it was read")
        swapped.append((current, new))

    store = SimpleNamespace(
        runs=lambda: {5: run},
        pointer=lambda: reads.pop(0) if len(reads) > 1 else reads[0],
        swap=compare_and_set,
        record_run_if=lambda *a, **k: True,
    )
    monkeypatch.setattr(swap, "version_store", lambda s: store)
    monkeypatch.setattr(swap, "tables_kept", lambda *a: None)
    judged: list = []
    monkeypatch.setattr(swap, "check_unmoved", lambda current, *a: judged.append(current))
    monkeypatch.setattr(swap, "_speed_layer_maintains", lambda s: ["page_views"])
    monkeypatch.setattr(swap, "_retain", lambda *a: None)
    monkeypatch.setattr(swap, "_landed_by_another", lambda *a: None)
    pointer = swap.swap_version(settings, 5)
    assert judged == [before, after], "judged again on the pointer that moved"
    assert [current for current, _ in swapped] == [after]
    assert pointer.entry("clicks").version == 4 and pointer.entry("page_views").version == 5

    def moved_its_views(current, *a):  # the second reading: another run swapped this run's view
        if current is after:
            raise PointerMoved("page_views moved since this run read the pointer")

    reads[:] = [before, after, after]
    swapped.clear()
    monkeypatch.setattr(swap, "check_unmoved", moved_its_views)
    with pytest.raises(PointerMoved, match="page_views moved"):
        swap.swap_version(settings, 5)
    assert swapped == []
    # A pointer that moves at every try: refused after a bounded number, naming it.
    reads[:] = [after]
    tries: list = []
    store.swap = lambda current, new: tries.append(1) or (_ for _ in ()).throw(PointerMoved("moved"))
    monkeypatch.setattr(swap, "check_unmoved", lambda *a: None)
    with pytest.raises(PointerMoved, match="kept moving"):
        swap.swap_version(settings, 5)
    assert len(tries) == swap.SWAP_TRIES


def test_a_verify_of_a_definition_switched_away_since_its_run_is_refused_naming_it(settings, monkeypatch):
    """A run computed a changed view under both definitions; `views apply` switched it before the
    DAG's verify task: the old definition's storage name was no longer known, and the verify failed
    with a KeyError (exit 1, retried twice) instead of a refusal."""
    monkeypatch.setattr(job, "time", SimpleNamespace(time=lambda: 1.0))
    monkeypatch.setattr(swap, "time", SimpleNamespace(time=lambda: 1.0))
    tables = {"clicks": {"rows": 1, "cells": 1, "total": 1}, "clicks__7d9554ed": {"rows": 1, "cells": 1, "total": 1}}
    run = {"state": "verified", "views": ["clicks", "clicks__7d9554ed"], "started_ms": 0, "verified_ms": 0}
    store = SimpleNamespace(
        runs=lambda: {5: {**run, "stats": {"tables": tables}}}, pointer=lambda: None, record_run_if=lambda *a, **k: True
    )
    monkeypatch.setattr(job, "version_store", lambda s: store)
    monkeypatch.setattr(job, "tables_kept", lambda *a: None)
    monkeypatch.setattr(job, "selected_views", lambda *a: [SimpleNamespace(name="clicks__7d9554ed")])
    monkeypatch.setattr(job, "TableStats", lambda **kw: kw)
    scanned: list = []
    monkeypatch.setattr(job, "verify_table", lambda *a: scanned.append(a[1]))
    with pytest.raises(VerificationError, match="clicks: a definition no longer declared") as refused:
        job.verify_version(settings, 5)
    assert "run the batch again" in str(refused.value) and scanned == [], "refused before any scan"
