"""Which run records retention deletes: the meta table kept one row per batch run for ever, and every
swap, verification, retention pass and report read them all."""

from __future__ import annotations

import random

from stores.pointer import Pointer, ViewEntry
from stores.run_records import prunable_runs

NOW = 1_900_000_000_000
GRACE = 3_600_000


def pointer(*versions: int) -> Pointer:
    return Pointer(
        entries={f"view{v}": ViewEntry(f"view{v}_v{v}", v, 1_000 * v) for v in versions},
        generation=1,
        version=max(versions),
        swapped_ms=NOW,
    )


def plan(runs, current=None, present=(), keep=3, may_run=lambda _run: None):
    return prunable_runs(runs, current, set(present), keep, NOW, GRACE, may_run)


def test_old_records_of_runs_whose_tables_are_gone_are_pruned_the_newest_kept():
    runs = {v: {"state": "dropped"} for v in range(1, 11)}
    assert plan(runs, keep=3) == list(range(1, 8))
    runs[3]["state"] = "failed"
    assert plan(runs, keep=3) == list(range(1, 8))


def test_a_record_that_still_matters_is_kept():
    runs = {v: {"state": "dropped"} for v in range(1, 11)}
    runs[1]["state"] = "live"  # the pointer names it
    runs[2]["state"] = "retired"  # its tables are kept for rollback
    runs[3] = {"state": "verified", "verified_ms": NOW - 1_000}  # still to swap
    runs[4] = {"state": "dropped", "realtime_cleaned_s": {"a": 50}}  # the highest clean-up of view a
    runs[5] = {"state": "dropped", "realtime_cleaned_s": {"a": 40, "b": 70}}  # the highest of b
    runs[6] = {"state": "dropped", "realtime_cleaned_s": {"a": 30}}  # below a's highest: not needed
    # 7 has a table left (a drop failed), 8 is named by the pointer whatever its record says
    assert plan(runs, current=pointer(1, 8), present={7}, keep=2) == [6]


def test_a_writing_run_is_pruned_once_its_process_is_gone_or_another_hosts_run_is_silent_past_the_grace():
    """A run of another host silent past the grace was kept for good (it might record "verified" on
    a row made anew), while retention dropped its tables: it now records only while its record says
    "writing" (stores.batch_views.record_run_if), so it is pruned as its tables are dropped. One of
    this host whose process is gone never writes again."""
    old = NOW - 2 * GRACE
    runs = {
        1: {"state": "writing", "started_ms": old, "host": "here"},  # its process is gone
        2: {"state": "writing", "started_ms": old, "host": "elsewhere"},  # cannot be asked: silent too long
        7: {"state": "writing", "started_ms": old, "heartbeat_ms": NOW - 1_000, "host": "elsewhere"},  # beating
        3: {"state": "writing", "started_ms": old, "host": "here", "running": True},  # still running
        4: {"state": "writing", "started_ms": NOW - 1_000, "host": "here"},  # gone, but within grace
        5: {"state": "dropped"},
        6: {"state": "dropped"},
    }

    def may_run(run):
        return run.get("running", False) if run["host"] == "here" else None

    assert plan(runs, keep=1, may_run=may_run) == [1, 2, 5, 6]


def test_the_plan_never_drops_the_newest_nor_a_serving_nor_a_highest_clean_up_on_random_records():
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(0, 40)
        runs = {}
        for v in rng.sample(range(1, 200), n):
            run = {"state": rng.choice(["writing", "verified", "live", "retired", "dropped", "failed"])}
            if rng.random() < 0.3:
                run["realtime_cleaned_s"] = {rng.choice("ab"): rng.randint(0, 5)}
            run["verified_ms"] = rng.choice([NOW - 1_000, NOW - 2 * GRACE])
            runs[v] = run
        keep = rng.randint(1, 10)
        named = set(rng.sample(sorted(runs), min(2, len(runs))))
        current = pointer(*named) if named else None
        present = set(rng.sample(sorted(runs), min(3, len(runs))))
        pruned = set(plan(runs, current, present, keep))
        assert not pruned & set(sorted(runs)[-keep:])
        assert not pruned & named and not pruned & present
        assert all(
            runs[v]["state"] in ("dropped", "failed")
            or (runs[v]["state"] in ("verified", "writing") and runs[v]["verified_ms"] < NOW - GRACE)
            for v in pruned
        )
        for view in "ab":
            cleaned = [r["realtime_cleaned_s"][view] for r in runs.values() if view in r.get("realtime_cleaned_s", {})]
            left = [
                r["realtime_cleaned_s"][view]
                for v, r in runs.items()
                if v not in pruned and view in r.get("realtime_cleaned_s", {})
            ]
            assert max(cleaned, default=None) == max(left, default=None), "the highest clean-up per view stays"


def test_the_pointers_own_version_is_kept_even_when_no_entry_names_it():
    """The realtime clean-up records its mark on the record of the run that last moved the pointer:
    after a move that retired views, no entry may name it."""
    runs = {v: {"state": "dropped"} for v in range(1, 6)}
    current = Pointer(entries={"a": ViewEntry("a_v5", 5, 5_000)}, generation=3, version=2, swapped_ms=NOW)
    assert plan(runs, current=current, keep=1) == [1, 3, 4]


def test_a_verified_run_never_swapped_goes_once_past_its_grace():
    old, recent = NOW - 2 * GRACE, NOW - 1_000
    runs = {
        1: {"state": "verified", "started_ms": old, "verified_ms": old},
        2: {"state": "verified", "started_ms": old, "verified_ms": recent},  # may still swap
        3: {"state": "verified", "started_ms": old, "verified_ms": old, "heartbeat_ms": recent},  # being verified
        4: {"state": "dropped"},
    }
    assert plan(runs, keep=1) == [1]


def test_the_run_an_older_record_reads_its_windows_start_from_stays():
    """A record without previous_cutoff_ms (an earlier release's) has its report window start at the
    highest cutoff of the earlier served runs: pruning that run widened the window without a word."""
    runs = {
        1: {"state": "dropped", "cutoff_ms": 100},
        2: {"state": "dropped", "cutoff_ms": 200},  # the window start of 4
        3: {"state": "failed", "cutoff_ms": 300},  # failed: not a window start
        4: {"state": "live", "cutoff_ms": 400},
        5: {"state": "dropped", "cutoff_ms": 500, "previous_cutoff_ms": 400},
        6: {"state": "dropped", "cutoff_ms": 600, "previous_cutoff_ms": 500},
    }
    assert plan(runs, keep=1) == [1, 3, 5]
