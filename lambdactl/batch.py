"""`lambdactl batch` and `clean-realtime`: a batch recomputation or one of its steps (what the Airflow
DAG's tasks call), the clean-up of absorbed rows."""

from __future__ import annotations

import argparse
import logging
import time

from definitions.settings import Settings
from lambdactl.output import _emit, _say
from lambdactl.report import cmd_report

log = logging.getLogger("lambdactl")

# Exit codes of `lambdactl batch` beyond 0 (done) and 2 (refused): 3, with --plan: no view would
# move past the cutoff it serves at; with --skip-if-overtaken: a run beside this one overtook it;
# 4: the master dataset is not complete up to the cutoff yet.
NOTHING_NEW = 3
NOT_COVERED_YET = 4
CLEANUP_LEFT = 5  # clean-realtime finished with rows left for a later clean-up (answers unaffected)


def cmd_batch(settings: Settings, args: argparse.Namespace) -> int:
    """Run a batch recomputation, or one of its steps (what the Airflow DAG's tasks call)."""
    from batch_layer.job import (
        CutoffError,
        choose_cutoff,
        iso,
        parse_cutoff,
        run_batch,
        swap_version,
        verify_version,
    )
    from stores.batch_views import PointerMoved
    from stores.batch_writer import VerificationError
    from stores.pointer import NotCoveredYet, Overtaken
    from stores.registry import version_store

    OVERTAKING = (Overtaken, PointerMoved)  # the refusals another run's swap causes
    cutoff = parse_cutoff(args.cutoff) if args.cutoff else None
    try:
        if args.plan:
            current = version_store(settings).pointer()
            names = planned_names(settings, current, args.views)
            planned = choose_cutoff(settings, cutoff, current, names)
            # new when some view of the run would move past the cutoff it serves at
            fresh = current is None or any(current.entry(n) is None or current.cutoff_of(n) < planned for n in names)
            _emit(
                {
                    "cutoff": iso(planned),
                    "cutoff_ms": planned,
                    "new": fresh,
                    "views": names,
                    "serving_version": current.version if current else None,
                }
            )
            return 0 if fresh or args.force else NOTHING_NEW
        if args.verify is not None:
            tables = verify_version(settings, args.verify)
            _emit({"version": args.verify, "verified": {k: vars(v) for k, v in tables.items()}})
            return 0
        if args.swap is not None:
            pointer = swap_version(settings, args.swap)
            moved = {n: e.cutoff_ms for n, e in pointer.entries.items() if e.version == args.swap}
            _emit(
                {
                    "version": args.swap,
                    "cutoff": iso(max(moved.values(), default=0)),
                    "views": sorted(moved),
                    "swapped": True,
                }
            )
            return 0
        result = run_batch(settings, cutoff, args.views, args.force, swap=not args.no_swap)
    except NotCoveredYet as exc:
        log.error("batch refused for now: %s", exc)
        return NOT_COVERED_YET
    except (CutoffError, VerificationError, PointerMoved) as exc:
        why = overtaken_run(settings, args, cutoff) if args.skip_if_overtaken and isinstance(exc, OVERTAKING) else ""
        if why:
            _say(f"nothing to do: {why}; the next run plans a newer cutoff ({exc})")
            return NOTHING_NEW
        log.error("batch refused: %s", exc)
        return 2
    if result.skipped:
        _say(f"nothing to do: version {result.version} already serves cutoff {iso(result.cutoff_ms)}")
    else:
        verb = "now serves" if not args.no_swap else "is written and verified, not yet serving,"
        _say(
            f"version {result.version} {verb} {', '.join(result.tables)} below {iso(result.cutoff_ms)} "
            f"({result.events:,} distinct events, {result.seconds:.0f}s)"
        )
        for name, stats in result.tables.items():
            _say(f"  {name}: {stats.rows:,} rows, {stats.cells:,} cells, checksum {stats.checksum:,}")
        if not args.no_swap and not args.no_report:
            # The accuracy report of the window this run absorbed (the DAG runs it as its own task).
            try:
                cmd_report(settings, argparse.Namespace(version=result.version, limit=0, json=False))
            except Exception as exc:  # the batch itself is done and serving; say what failed
                log.error(
                    "the accuracy report failed (%s: %s); version %d serves all the same: `lambdactl report` "
                    "makes it again (-v shows the traceback)",
                    type(exc).__name__,
                    str(exc)[:500],
                    result.version,
                )
                log.debug("the accuracy report's failure", exc_info=exc)
    if args.json:
        _emit(
            {
                "version": result.version,
                "cutoff": iso(result.cutoff_ms),
                "cutoff_ms": result.cutoff_ms,
                "run_id": result.run_id,
                "skipped": result.skipped or None,
            }
        )
    return 0


def planned_names(settings: Settings, current, names: list[str] | None) -> list[str]:
    """The storage names a run of `names` (default: every view) computes: a changed view's served
    and new definitions both (batch_layer.job.selected_views). A name no view has is kept as given:
    the plan does not judge it, the run itself refuses it, naming it (the DAG's recompute task)."""
    from batch_layer.job import CutoffError, selected_views

    if names is None:
        return [v.name for v in selected_views(settings, current)]
    out: list[str] = []
    for name in names:
        try:
            found = [v.name for v in selected_views(settings, current, [name])]
        except CutoffError:
            found = [name]
        out += [n for n in found if n not in out]
    return out


def overtaken(current, views: list[str], cutoff_ms: int, own_version: int | None = None, basis=None) -> str:
    """Why a run of `views` at `cutoff_ms`, refused because another run swapped (Overtaken,
    PointerMoved), has nothing left to do: each of its views (those its own version does not serve)
    serves at its cutoff or past it, and another run moved at least one there since it read the
    pointer (its `basis`, stores.pointer_moves.run_basis, for a written run; without one, a view past
    its cutoff: a view at it already when the run planned does not count); the next run plans a
    newer cutoff. "" otherwise, and the refusal stands: the pointer moved in another way (an alias,
    a view retiring), or some of its views serve below its cutoff, whose recompute would not serve
    (skipped, the run said "nothing to do" and its request was dropped unseen)."""
    from collections.abc import Mapping

    from definitions.times import iso_ms

    if current is None:
        return ""
    read = basis.get("entries") if isinstance(basis, Mapping) else None
    ahead, behind = [], []
    for name in views:
        e = current.entry(name)
        if e is not None and e.version == own_version:
            continue
        if e is None or e.cutoff_ms < cutoff_ms:
            behind.append(name)  # this run's recompute of it would serve something newer
            continue
        if isinstance(read, Mapping):
            moved = read.get(name) != [e.table, e.version, e.cutoff_ms]
        else:
            moved = e.cutoff_ms > cutoff_ms
        if moved:
            ahead.append(f"{name} (version {e.version}, cutoff {iso_ms(e.cutoff_ms)})")
    if not ahead or behind:
        return ""
    return f"a run beside this one swapped first, at or past this run's cutoff {iso_ms(cutoff_ms)}: " + ", ".join(ahead)


def overtaken_run(settings: Settings, args: argparse.Namespace, cutoff_ms: int | None) -> str:
    """overtaken() for the run a refused `lambdactl batch` was about: the recorded run of a `--swap`,
    else the views and cutoff given. "" when that run is unknown (no cutoff given: it was planned
    now; a record that names none) or cannot be read: the refusal stands."""
    from stores.registry import version_store

    try:
        store = version_store(settings)
        current = store.pointer()
        if args.swap is not None:
            run = store.runs().get(args.swap)
            run = run if isinstance(run, dict) else {}
            views, cutoff_ms, basis = run.get("views"), run.get("cutoff_ms"), run.get("basis")
        else:
            views, basis = planned_names(settings, current, args.views), None
        if type(cutoff_ms) is not int or not isinstance(views, list) or not all(isinstance(v, str) for v in views):
            return ""
        return overtaken(current, views, cutoff_ms, args.swap, basis)
    except Exception as exc:  # noqa: BLE001 - whatever reading the stores met: the refusal itself is the answer
        log.debug("whether the run was overtaken is unknown: %s: %s", type(exc).__name__, exc)
        return ""


def settle_after_swap(settings: Settings, pointer) -> None:
    """Answers computed from the pointer before `pointer` (the API reuses a read for
    api.pointer_cache_s) may still read the realtime rows that swap made unneeded: wait until none
    can be running, before deleting them, counted from when the swap landed (its run's
    `swap_landed_ms`; the pointer's own stamp precedes the compare-and-set). At most the setting
    itself: a swap stamped ahead by another host's clock does not stall this."""
    from batch_layer.swap import record_completed_swap
    from definitions.settings_store import running_longest
    from stores.registry import version_store

    store = version_store(settings)
    runs = store.runs()
    landed_ms = pointer.swapped_ms
    if runs.get(pointer.version, {}).get("state") == "verified":
        # Its compare-and-set landed (the pointer names it) and its caller did not hear so (a timeout):
        # when is not known, only that it was before now: from now. Recorded against the pointer read
        # after the runs (record_completed_swap), if it is still that swap's.
        landed_ms = int(time.time() * 1000)
        fresh = store.pointer()
        if fresh is not None and fresh.version == pointer.version:
            landed_ms = record_completed_swap(store, runs, fresh, pointer.version)
    try:
        landed_ms = max(landed_ms, int(runs.get(pointer.version, {}).get("swap_landed_ms", 0)))
    except (TypeError, ValueError):
        pass  # a record that is no number: the pointer's stamp
    whole_s = running_longest(settings, lambda s: s.batch.cleanup_settle_s)  # the running API's, if longer
    settle_s = min(whole_s, landed_ms / 1000 + whole_s - time.time())
    if settle_s > 0:
        _say(
            f"waiting {settle_s:.0f}s after the swap (batch.cleanup_settle_s): answers from the previous pointer may still run"
        )
        time.sleep(settle_s)


def delete_retiring(settings: Settings, pointer=None) -> bool:
    """Delete the realtime rows of the pointer's retiring storage names (stores.pointer) that no entry
    serves and the speed layer does not maintain, once no answer can still read them; then take
    them, and any the speed layer maintains again, off the list (compare-and-set). False when some
    rows could not all be deleted (their names stay retiring, for a later clean-up)."""
    from stores.pointer_moves import retiring_done
    from stores.realtime_cleanup import delete_absorbed
    from stores.registry import version_store
    from stores.replay_cleanup import drop_overlays_of, overlays_of

    store = version_store(settings)
    pointer = pointer or store.pointer()
    if pointer is None or not pointer.retiring:
        return True
    complete = True
    todo, again = _retiring_now(settings, pointer, say=True)
    as_of_us = 0
    if todo or again:
        # A name maintained again waits too: while it is retiring, retention keeps its old table
        # (stores.pointer.retention_plan), which an answer from before its removal may still read.
        settle_after_swap(settings, pointer)
        # Read again after the wait: a name maintained or replayed meanwhile keeps its rows. One
        # maintained again during the deletion (`views apply` adding it back) keeps those written
        # since this read: the deletion spares rows written after it.
        as_of_us = time.time_ns() // 1000
        after, again = _retiring_now(settings, pointer)
        todo = sorted(set(todo) & set(after))
    if todo:
        everything = int(time.time()) + 366 * 86_400  # past any ingest bucket a realtime row can have
        # With the rows of their replays: every overlay's, not only the newest (a switch killed half-way
        # leaves older ones, which would otherwise become the newest and stay for good).
        names = [*todo, *(m.shadow for m in overlays_of(settings, todo) if m.shadow)]
        cleanup = delete_absorbed(settings, dict.fromkeys(names, everything), timestamp_us=as_of_us)
        if not cleanup.complete:
            _say(f"realtime rows of {', '.join(todo)} not all deleted ({cleanup.summary()}): they stay retiring")
            todo, complete = [], False
        else:
            drop_overlays_of(settings, todo)
            _say(f"realtime rows of retired {', '.join(todo)} deleted: {cleanup.summary()}")
        # Maintained again: read once more after the deletion, just before the pointer moves
        # (another apply may have marked one retiring again meanwhile, about to stop maintaining it).
        again = _retiring_now(settings, pointer)[1]
    done = [*todo, *again]
    if done:
        move_pointer(store, lambda p: retiring_done(p, done, int(time.time() * 1000)), "run the clean-up again")
    return complete


def _drop_retired_tables(settings: Settings, pointer) -> list[str]:
    """After delete_retiring completed for the names retiring in `pointer` (read before the settle
    wait, so retiring for at least batch.cleanup_settle_s: no answer still reads their tables), run a
    batch run's retention on the pointer as it is now: a view removed by `views apply` whose clean-up
    was left to this command loses its tables now, not at the next batch run. A name still retiring
    (a replay holds it) keeps its newest table, as in any retention. Nothing retiring in `pointer`:
    no retention. The tables dropped (a failed retention is logged, and gives those it dropped
    before it failed)."""
    from stores.registry import version_store

    if not pointer.retiring:
        return []
    return drop_unnamed_tables(settings, version_store(settings), "after the clean-up of retired views")


def drop_unnamed_tables(settings: Settings, store, when: str) -> list[str]:
    """A batch run's retention now (batch_layer.swap.retain_quietly: a failure is logged), saying
    which tables it dropped; those tables."""
    from batch_layer.swap import retain_quietly

    dropped = retain_quietly(settings, store, when)
    if dropped:
        _say(f"dropped batch tables no pointer entry names: {', '.join(dropped)}")
    return dropped


def _retiring_now(settings: Settings, pointer, say: bool = False) -> tuple[list[str], list[str]]:
    """stores.pointer_moves.retiring_now with what the speed layer maintains and the replay marks, as read
    now. With a marker of an older speed layer (no list of views), nothing is deleted."""
    from stores.checkpoints import read_marker
    from stores.pointer_moves import retiring_now
    from stores.replays import read_marks

    marker = read_marker(settings)
    if marker is not None and marker.views is None:
        if say:
            _say("the speed layer's marker does not list the views it maintains: retired rows are kept until it does")
        return [], []
    replaying = read_marks(settings)
    todo, again = retiring_now(pointer, set(marker.views or {}) if marker is not None else set(), replaying)
    held = set(pointer.retiring) & set(replaying) - set(again) - set(pointer.entries)
    for name in sorted(held) if say else []:
        _say(
            f"{name}: a replay holds it; its realtime rows are deleted by a clean-up after the replay "
            f"(if none runs: `lambdactl replay --view {name} --resume` clears the mark)"
        )
    return todo, again


def move_pointer(store, change, retry_hint: str = "run `lambdactl views apply` again"):
    """Apply `change` (pointer → new pointer, or None: nothing to do) by compare-and-set, again on a
    pointer that a batch moved meanwhile; the pointer written, or None."""
    from stores.batch_views import PointerMoved

    for _ in range(5):
        current = store.pointer()
        new = change(current) if current is not None else None
        if new is None:
            return None
        try:
            store.swap(current, new)
            return new
        except PointerMoved:
            continue  # a batch swapped meanwhile: read it again
    raise SystemExit(f"the pointer kept moving: {retry_hint}")


def cmd_clean_realtime(settings: Settings, args: argparse.Namespace) -> int:
    from lambdactl.replay_orphans import Orphans, delete_orphaned_replays
    from stores.realtime_cleanup import delete_absorbed
    from stores.registry import version_store
    from stores.replay_cleanup import drop_overlay, overlay_cutoffs
    from stores.replays import read_overlays

    pointer = version_store(settings).pointer()
    if pointer is None:
        _say("no batch version serves yet: every realtime row is still needed")
        return 0
    settle_after_swap(settings, pointer)
    retired_complete = delete_retiring(settings, pointer)
    dropped_tables = _drop_retired_tables(settings, pointer) if retired_complete else []
    # Each view's rows below the cutoff its own batch table covers; a view no table serves keeps all.
    # A replay's rows (stores.replays) go below their view's cutoff too.
    cutoffs = pointer.cleanup_cutoffs_s()
    shadows, finished = overlay_cutoffs(read_overlays(settings), cutoffs)
    # Recorded first: a report of a window below these cutoffs would compare batch cells with rows
    # deleted (reports.build.compare_window leaves those cells out), even if the clean-up stops half-way.
    version_store(settings).record_run(pointer.version, realtime_cleaned_s=cutoffs)
    cleanup = delete_absorbed(settings, {**cutoffs, **shadows})
    _say(f"realtime clean-up below each view's serving cutoff: {cleanup.summary()}")
    for overlay in finished if cleanup.complete else []:
        drop_overlay(settings, overlay)
        _say(f"{overlay.view}: its batch cutoff reached the replay's split: the replayed rows are read no more")
    # Rows of replays no mark names any more (a cancel that could not delete them, say); the shadows
    # of the overlays just finished lost their rows in this scan.
    absorbed = {overlay.shadow for overlay in finished} if cleanup.complete else set()
    orphaned = Orphans()
    try:
        orphaned = delete_orphaned_replays(settings, cleanup.views_seen - absorbed)
    except Exception as exc:  # noqa: BLE001 - no answer reads them: a later clean-up, or their TTL, ends them
        orphaned = Orphans(error=f"{type(exc).__name__}: {str(exc)[:300]}")
        _say(f"rows of replays no mark names are kept for a later clean-up: {orphaned.error}")
    if orphaned.names:
        _say(
            f"{orphaned.rows:,} rows of replays no mark names deleted ({', '.join(orphaned.names)})"
            + ("" if orphaned.complete else "; some token ranges could not be read: a later clean-up goes on")
        )
    if args.json:
        _emit(
            {
                "version": pointer.version,
                "cutoffs_s": cutoffs,
                "cutoff_s": cleanup.cutoff_s,
                "rows_below_cutoff": cleanup.rows_below_cutoff,
                "deletions": cleanup.deletions,
                "complete": cleanup.complete,
                "unreadable": [u.describe() for u in cleanup.unreadable],
                "orphaned_replays": orphaned.as_json(),
                "retired_complete": retired_complete,
                "dropped_tables": dropped_tables,
            }
        )
    left = [
        *([] if cleanup.complete else ["rows below the cutoffs"]),
        *([] if retired_complete else ["rows of retired views"]),
        *([] if orphaned.complete and not orphaned.error else ["rows of replays no mark names"]),
    ]
    if left:
        # Answers stay exact (no answer reads these rows); the exit status tells a script or the
        # DAG's task that the clean-up it asked for is not finished.
        _say(f"clean-up incomplete: {', '.join(left)} left; answers are unaffected; run it again")
        return CLEANUP_LEFT
    return 0
