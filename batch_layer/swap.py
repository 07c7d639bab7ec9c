"""The swap of a verified batch version: move the pointer entries of the views it recomputed to its
tables with one compare-and-set (refused when the pointer moved in a way that changed what the run
planned against, when its tables were dropped, or when its grace period is nearly over), record which
runs serve, then apply retention. A retried swap whose compare-and-set landed records what it would have.
"""

from __future__ import annotations

import logging
import time

from definitions.settings import Settings
from stores import checkpoints
from stores.batch_views import Pointer, PointerMoved
from stores.batch_writer import VerificationError, missing_tables
from stores.pointer import Overtaken, run_tables
from stores.pointer_moves import advance, check_unmoved
from stores.registry import version_store

log = logging.getLogger("lambda.batch")


def tables_kept(settings: Settings, version: int, run: dict) -> None:
    """VerificationError naming the tables of `version` that are gone (dropped by retention)."""
    missing = missing_tables(settings, run_tables(version, run))
    if missing:
        raise VerificationError(
            f"version {version}'s tables {', '.join(missing)} were dropped (retention: a run verified over "
            f"batch.retention_grace_s ago and never swapped, or one that served long ago); run the batch again"
        )


# A verified run swaps only this long before retention may drop its tables (stores.pointer.retention_plan).
SWAP_MARGIN_MS = 60_000


def not_past_grace(settings: Settings, version: int, run: dict) -> None:
    """A verified run whose grace period is (nearly) over is refused: retention, in any process, may
    drop its tables between this check and the swap."""
    # Its last beat too (retention counts it: stores.pointer.retention_plan): a `--verify` scan beats.
    since = max(run.get("started_ms", 0) or 0, run.get("verified_ms", 0) or 0, run.get("heartbeat_ms", 0) or 0)
    if time.time() * 1000 - since > settings.batch.retention_grace_s * 1000 - SWAP_MARGIN_MS:
        raise VerificationError(
            f"version {version} was verified over batch.retention_grace_s ({settings.batch.retention_grace_s}s) "
            "ago and never swapped: retention may have dropped its tables, or may drop them at any time; run "
            "the batch again"
        )


def hold_for_swap(settings: Settings, store, version: int, run: dict) -> bool:
    """Right before the compare-and-set: refuse a run whose grace is (nearly) over, then beat it, so
    that retention elsewhere counts its grace from now however long the compare-and-set takes (a
    slow HBase, a paused process: checked only, retention could drop the tables between the check
    and the compare-and-set, and the pointer would name tables that are gone). A beat that took
    longer than the margin left is refused too: retention may have read the record before it.
    False when the record is no longer verified (another attempt swapped it, or retention gave it up)."""
    not_past_grace(settings, version, run)
    checked_ms = time.time() * 1000
    if not store.record_run_if(version, "verified", heartbeat_ms=int(checked_ms)):
        return False
    if time.time() * 1000 - checked_ms > SWAP_MARGIN_MS:
        raise VerificationError(
            f"recording version {version}'s last beat before its swap took over {SWAP_MARGIN_MS // 1000}s: retention "
            "may have dropped its tables meanwhile; run the batch again"
        )
    return True


def _landed_by_another(settings: Settings, store, runs: dict, run: dict, version: int) -> Pointer | None:
    """The pointer, when another attempt at this same swap (a retried task beside the one it replaced,
    `lambdactl batch --swap N` beside the DAG's) moved it to the version: then it serves, as asked
    (recorded so here if that attempt did not). None otherwise."""
    now = store.pointer()
    if now is None or not any((e := now.entry(n)) is not None and e.version == version for n in run["views"]):
        return None
    log.info("version %d serves already: another attempt at its swap landed it", version)
    if store.runs().get(version, {}).get("state") == "verified":  # that attempt did not record it
        record_completed_swap(store, runs, now, version)
    _retain(settings, store)
    return now


def beat_verified(store, version: int) -> None:
    """A beat of a verified run still to swap; none is needed once another process swapped it."""
    if store.record_run_if(version, "verified", heartbeat_ms=int(time.time() * 1000)):
        return
    state = (store.runs().get(version) or {}).get("state")
    if state not in ("live", "retired"):
        raise _given_up(version, state)


def _given_up(version: int, state: str | None) -> VerificationError:
    """The refusal of a run whose record is no longer "verified" and that never served."""
    return VerificationError(
        f"version {version} is no longer recorded verified (its record: {state or 'gone'}): retention gave it "
        "up and may have dropped its tables; run the batch again"
    )


SWAP_TRIES = 5  # compare-and-sets lost to moves that left the run's views as it read them


def swap_version(settings: Settings, version: int) -> Pointer:
    """Move the entries of the views a verified version recomputed to its tables — compare-and-set;
    PointerMoved if the pointer moved since its run read it in a way that changed what the run
    planned against (stores.pointer_moves.check_unmoved), VerificationError if its tables were dropped —
    then apply retention. A compare-and-set lost to a move between this swap's read of the pointer
    and its write (a clean-up's bookkeeping, another view's swap) is made again on the pointer read
    again, judged again."""
    store = version_store(settings)
    for _ in range(SWAP_TRIES):
        swapped = _swap_once(settings, store, version)
        if swapped is not None:
            return swapped
        log.info("version %d: the pointer moved as it was swapped: read and judged again", version)
    raise PointerMoved(f"version {version}: the pointer kept moving as it was swapped ({SWAP_TRIES} tries): swap again")


def _swap_once(settings: Settings, store, version: int) -> Pointer | None:
    """swap_version's one try; None when its compare-and-set lost to a move and no other attempt of
    this swap made it."""
    runs = store.runs()  # before the pointer: a run live here and not named by it was replaced
    run = runs.get(version)
    if run is None or run.get("state") not in ("verified", "live", "retired"):
        raise VerificationError(f"version {version} cannot serve: its run is {run.get('state') if run else 'unknown'}")
    current = store.pointer()
    # Only its own swap names its version: any view of it served means that swap landed (a manual
    # run may have replaced other views of it since, before this retry of the swap).
    serving = [n for n in run["views"] if current is not None and (e := current.entry(n)) and e.version == version]
    served = current if serving else None
    if serving and len(serving) < len(run["views"]):
        log.info("version %d serves %s already (its swap landed; later runs replaced the others)", version, serving)
    if run["state"] != "verified":
        if served is not None:
            _retain(settings, store)
            return served  # it serves already: swapping it again changes nothing
        raise Overtaken(f"version {version} served and was replaced since; run the batch again instead of going back")
    if served is not None:  # its swap moved the pointer, and its process ended before recording so
        record_completed_swap(store, runs, served, version)
        _retain(settings, store)
        return served
    if not isinstance(run.get("stats"), dict):
        raise VerificationError(
            f"version {version}'s run record has no figures (a run killed while recording them): it does not "
            "serve; run the batch again"
        )
    tables_kept(settings, version, run)
    check_unmoved(current, run.get("based_on"), version, run.get("basis"))
    not_past_grace(settings, version, run)  # refused at once when it is over already
    maintained = _speed_layer_maintains(settings) if run.get("full") else ()  # WebHDFS: may take seconds
    pointer = advance(
        current,
        version=version,
        run_id=run["run_id"],
        cutoff_ms=run["cutoff_ms"],
        views=run["views"],
        full=bool(run.get("full")),
        stats=run["stats"],
        now_ms=int(time.time() * 1000),
        maintained=maintained,
    )
    if not hold_for_swap(settings, store, version, run):  # and again right before the compare-and-set
        landed = _landed_by_another(settings, store, runs, run, version)
        if landed is None:
            state = (store.runs().get(version) or {}).get("state")
            if state in ("live", "retired"):  # another attempt swapped it, and later runs replaced it since
                raise Overtaken(f"version {version} served and was replaced since; run the batch again")
            raise _given_up(version, state)
        return landed
    try:
        store.swap(current, pointer)
    except PointerMoved:
        return _landed_by_another(settings, store, runs, run, version)
    _retain(settings, store)
    return pointer


def _retain(settings: Settings, store) -> None:
    """Retention after a swap: the swap is done whatever it meets (a failure leaves old tables,
    which the next swap drops), so it never fails the run that swapped."""
    retain_quietly(settings, store, "after the swap")


def retain_before_writing(settings: Settings, store) -> None:
    """Retention at a run's start, before it writes: the tables of runs killed, failed or refused
    before their swap go even while no swap succeeds (each such run left a whole set). Never fails
    the run; the grace keeps the tables of runs still writing or about to swap."""
    retain_quietly(settings, store, "before this run")


def retain_quietly(settings: Settings, store, when: str) -> list[str]:
    """Retention (stores.pointer.retention_plan) that never fails its caller: a failure is logged
    and leaves the old tables to the next pass. The tables dropped."""
    from stores.adapters import RetentionIncomplete

    try:
        return store.retain(settings.batch.keep_versions)
    except RetentionIncomplete as exc:
        log.warning("retention %s: %s; the next run or swap tries again", when, exc)
        return exc.dropped
    except Exception as exc:
        log.warning("retention %s failed (%s: %s); the next run or swap tries again", when, type(exc).__name__, exc)
        return []


def record_completed_swap(store, runs: dict[int, dict], served: Pointer, version: int) -> int:
    """Record what the swap of `version`, whose compare-and-set moved the pointer to `served` but
    whose process ended (or timed out) before recording it, would have: the run serves, and the runs
    it replaced are retired — those `runs` (read before `served`) has as live that `served` does not
    name. The landing time it records (ms): now."""
    # When it landed is not known, only that it was before now: the clean-up settles from now.
    landed_ms = int(time.time() * 1000)
    store.record_run(version, state="live", swapped_ms=served.swapped_ms, swap_landed_ms=landed_ms)
    for replaced, record in runs.items():
        if record.get("state") == "live" and replaced not in served.versions():
            store.record_run(replaced, state="retired")
    return landed_ms


class MarkerUnavailable(RuntimeError):
    """The speed layer's marker could not be read: a failure that may pass (lambdactl exits 1, and
    the DAG retries), not a refusal."""


def _speed_layer_maintains(settings: Settings) -> set[str] | None:
    """The storage names the speed layer maintains, as its marker says now (None: a marker of older
    code, which does not list them). A full run keeps their entries (stores.pointer_moves.advance)."""
    try:
        marker = checkpoints.read_marker(settings)
    except Exception as exc:  # HDFS unreadable: fail the swap, changing nothing, rather than guess
        raise MarkerUnavailable(
            f"the speed layer's marker cannot be read ({type(exc).__name__}: {exc}): nothing was changed; "
            "swap again once HDFS answers"
        ) from None
    if marker is None:
        return set()
    return None if marker.views is None else set(marker.views)
