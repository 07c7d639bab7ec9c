"""`lambdactl views` (each view's state) and `lambdactl views apply` (bring the running platform to
the declared views: add, retire), while the other views keep answering.

`apply`:
1. reads the declared views (with `--modules`, first sets the persisted `views.modules`);
2. when the speed layer maintains another set of views, restarts it (only it: its streaming query
   resumes from its checkpoint; the views it had keep their state and are neither lost nor counted
   twice) and waits until its marker lists the declared views with the time each is maintained since;
3. has the API read the declared views again (new views get routes and answer 409 while building);
4. retires views that are no longer declared: their pointer entries go (compare-and-set), their
   realtime rows are deleted, then retention drops their batch tables;
5. for each view being built, runs the batch of those views at the first complete cutoff at or after
   the time the speed layer maintains them since (waiting for the archiver when it is not there
   yet); after its swap the view serves, exactly (stores.view_lifecycle).
Running it again when nothing changed does nothing; after a crash half-way, it carries on.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence

from definitions.section import browser_url
from definitions.settings import Settings
from lambdactl.output import VIEWS_LOCK_HOLDERS, _emit, _say

log = logging.getLogger("lambdactl")

SPEED_LAYER = "speed-layer"
RETIRED_ROWS_LEFT = 5  # as `lambdactl clean-realtime`: the views are applied; rows wait for a later clean-up
API_ANSWER_S = 60.0  # the API reloads the view modules and reads the stores before it answers


def _states(settings: Settings, registry) -> list:
    """The state of every definition the platform computes (by storage name), then the retired ones."""
    from stores.checkpoints import read_marker
    from stores.registry import version_store
    from stores.replays import read_marks
    from stores.view_lifecycle import changed_definitions, lifecycles
    from stores.view_versions import versions_of

    marker = read_marker(settings)
    pointer = version_store(settings).pointer()
    maintained = versions_of(registry, marker, pointer).maintained
    replaying = {view: m.from_ms for view, m in read_marks(settings).items()}
    changed = changed_definitions({v.name: v.fingerprint for v in maintained}, marker.definitions if marker else None)
    return lifecycles(
        maintained.names(), marker.views if marker else None, pointer, replaying=replaying, changed=changed
    )


def cmd_views(settings: Settings, args: argparse.Namespace) -> int:
    from definitions.times import iso_ms
    from definitions.view_loading import load_views
    from stores.view_versions import read_versions

    registry = load_views(settings)
    versions = read_versions(settings, registry)
    states = _states(settings, registry)
    served = {v.name: name for name, v in versions.served.items()}
    pending = {v.name: name for name, v in versions.pending.items()}
    if args.json:
        _emit(
            {
                "views": [
                    {**vars(s), "view": served.get(s.name) or pending.get(s.name), "answering": s.name in served}
                    for s in states
                ]
            }
        )
        return 0
    for s in states:
        cutoff = iso_ms(s.cutoff_ms) if s.cutoff_ms else "-"
        since = "start" if s.since_ms == 0 else iso_ms(s.since_ms) if s.since_ms else "-"
        label = s.name
        if s.name in pending:
            label = f"{pending[s.name]} (new definition {s.name})"
        elif served.get(s.name, s.name) != s.name:
            label = f"{served[s.name]} (as {s.name})"
        _say(f"{label:<30} {s.state:<9} since {since:<24} cutoff {cutoff:<24} {s.reason}")
    return 0


def cmd_views_apply(settings: Settings, args: argparse.Namespace) -> int:
    """One at a time per state directory: two at once each saved their own views and restarted the
    speed layer, and the one that lost retired the other's new views. A second one waits, then
    reads the settings the first saved (without --modules, it would re-apply those it read before)."""
    from definitions.files import state_lock
    from definitions.settings_store import SettingsConflict, load

    with state_lock(settings.state_dir, "views.lock", VIEWS_LOCK_HOLDERS, _say) as waited:
        if waited:
            try:
                settings = load()
            except SettingsConflict as exc:
                log.error("%s", exc)
                return 2
        return _apply(settings, args)


def _apply(settings: Settings, args: argparse.Namespace) -> int:
    from definitions.settings_store import persist_view_modules, with_view_modules
    from definitions.view_filters import declared_filter_problems
    from definitions.view_loading import load_views
    from definitions.view_versions import unresolved_message
    from infra.airflow import write_declared_views
    from stores.checkpoints import read_marker
    from stores.registry import version_store
    from stores.view_versions import read_versions

    if args.modules is not None and not [m for m in args.modules.split(",") if m.strip()]:
        log.error(
            "refused, nothing changed: --modules names no module (an unset variable?); to declare none, "
            "retiring every view a module declares, give --no-modules"
        )
        return 2
    if args.paths is not None and not [p for p in args.paths.split(",") if p.strip()]:
        log.error(
            "refused, nothing changed: --paths names no directory (an unset variable?); to search none, give --no-paths"
        )
        return 2
    if getattr(args, "no_modules", False):
        args.modules = ""
    if getattr(args, "no_paths", False):
        args.paths = ""
    if args.paths is not None and args.modules is None:
        given = "--no-paths" if getattr(args, "no_paths", False) else "--paths"
        log.error(
            "%s is given with --modules or --no-modules only (the directories searched for those modules): give both",
            given,
        )
        return 2
    try:
        if args.modules is not None:
            paths = None if args.paths is None else [p.strip() for p in args.paths.split(",") if p.strip()]
            settings = with_view_modules(settings, [m.strip() for m in args.modules.split(",") if m.strip()], paths)
        registry = load_views(settings)  # before anything is written: a set that does not load changes nothing
    except Exception as exc:  # noqa: BLE001 - a module's own code runs at import: any error refuses the set
        log.error("the declared views cannot be loaded: %s: %s", type(exc).__name__, str(exc)[:500])
        return 2
    problems = declared_filter_problems(settings, registry, settings.stack.java_home)
    if problems:  # Spark would meet them only in the layers' queries: every view's speed layer and batch stopped
        log.error("refused, nothing changed: a view's filter cannot be used: %s", "; ".join(problems))
        return 2
    marker, unreadable, pointer = None, None, None
    try:
        marker = read_marker(settings)
        if marker is None:
            pointer = version_store(settings).pointer()
    except Exception as exc:  # HDFS or HBase down: the stack is not running (told below, once the views are set)
        unreadable = exc
    if marker is None and pointer is not None and pointer.entries:
        # A batch run served, and no marker: `lambdactl reset-speed` removed it. Until the fresh start
        # writes a new one, nothing records what the speed layer maintains, and a view added now would
        # be served from no rows as exact.
        log.error(
            "refused, nothing changed: the speed layer was reset (`lambdactl reset-speed`) and has not started "
            "again: run `lambdactl up` (its fresh start recomputes the realtime views), then `lambdactl views apply`"
        )
        return 2
    if marker is not None:
        versions = read_versions(settings, registry, marker=marker)
        if versions.unresolved:
            log.error("refused, nothing changed: %s", unresolved_message(versions.unresolved))
            return 2
    if args.modules is not None:
        persist_view_modules(settings)
    declared = registry.names()
    _say(f"declared views: {', '.join(declared)}")
    write_declared_views(settings, declared)  # the DAG's trigger form offers them from its next parse
    deadline = time.monotonic() + args.timeout
    if unreadable is not None:
        log.error(
            "HDFS or HBase cannot be read (%s): the declared views are set; `lambdactl up` starts the platform with "
            "them, then run `lambdactl views apply` again to build the new ones",
            type(unreadable).__name__,
        )
        return 3
    # A changed view takes three rounds: its new definition is built beside the old one, the view
    # switches to it, then the old one is retired. Each round's steps can be repeated.
    complete = True
    for _ in range(3):
        maintained = read_versions(settings, registry).maintained.names()
        dropped = _mark_retiring(settings, maintained)
        _speed_layer_maintains(settings, maintained, deadline)
        reload_api(settings)
        complete = _retire(settings, maintained, dropped)
        building = [s for s in _states(settings, registry) if s.state == "building"]
        if building:
            _build(settings, building, deadline)
            reload_api(settings)
        if not _switch(settings, registry):
            break
        reload_api(settings)
    for s in _states(settings, registry):
        _say(f"  {s.name}: {s.state}{' (' + s.reason + ')' if s.reason else ''}")
    if not complete:
        _say("some realtime rows of retired views are left for a later clean-up (`lambdactl clean-realtime`)")
        return RETIRED_ROWS_LEFT
    return 0


def _switch(settings: Settings, registry) -> list[str]:
    """Switch every changed view whose new definition is serving (exact) to it: one compare-and-set of
    the pointer's aliases (stores.pointer_moves.switch); the API answers from the new definition from
    that moment on. The views switched."""
    from lambdactl.batch import move_pointer
    from stores.pointer_moves import switch
    from stores.registry import version_store
    from stores.view_versions import read_versions

    todo: dict[str, str] = {}

    def switched(current):
        versions = read_versions(settings, registry, pointer=current)
        ready = {s.name for s in _states(settings, registry) if s.state == "serving"}
        todo.clear()
        todo.update({name: v.name for name, v in versions.pending.items() if v.name in ready})
        moved = current
        for name, storage in todo.items():
            moved = switch(moved, name, storage, _now_ms())
        return moved if todo else None

    if move_pointer(version_store(settings), switched) is None:
        return []
    for name, storage in todo.items():
        _say(f"{name}: switched to its new definition ({storage}); its previous one is retired next")
    return list(todo)


def _speed_layer_maintains(settings: Settings, declared: list[str], deadline: float) -> None:
    """Restart the speed layer unless its marker already lists exactly `declared`; wait until it does."""
    from infra.errors import StackError
    from infra.stack import Stack
    from stores.checkpoints import read_marker

    marker = read_marker(settings)
    if marker is None:
        _say("the speed layer has not started yet: it maintains every declared view from its first start")
        return
    maintained = marker.views if marker.views is not None else None
    if maintained is not None and set(maintained) == set(declared):
        _say("the speed layer maintains every declared view")
        return
    _say("restarting the speed layer with the declared views (its query resumes from its checkpoint)")
    try:
        took = Stack(settings).restart(SPEED_LAYER)
    except StackError as exc:
        raise StackError(
            SPEED_LAYER,
            f"{exc}. Where this stack does not run it (stack.managed_services), restart it wherever it runs, "
            "then run `lambdactl views apply` again",
        ) from None
    while True:
        marker = read_marker(settings)
        if marker is not None and marker.views is not None and set(marker.views) == set(declared):
            _say(f"the speed layer maintains the declared views ({took:.0f}s to healthy)")
            return
        if time.monotonic() > deadline:
            raise StackError(SPEED_LAYER, "restarted, but its marker does not list the declared views")
        time.sleep(1.0)


def reload_api(settings: Settings) -> None:
    """Ask the API to read the declared views again (the persisted view modules) and serve them."""
    body = _ask_api(settings, "reload", "read the declared views")
    if body is not None:
        _say(
            f"the API serves {len(body['views'])} views (added: {body['added'] or 'none'}; "
            f"removed: {body['removed'] or 'none'})"
        )


def refresh_api(settings: Settings) -> None:
    """Ask the API to read the speed marker, the replay marks and the pointer again, serving the views
    it serves: a view module edited but not applied stays unserved (`lambdactl replay` asks this). A
    refusal is said, not raised: a worker that cannot read the marks reads them within a minute and
    meanwhile refuses a view whose replayed rows it cannot vouch for (serving_layer.speed_state)."""
    _ask_api(settings, "refresh", "read the replay marks again", refused_is_fatal=False)


def _ask_api(settings: Settings, what: str, doing: str, refused_is_fatal: bool = True) -> dict | None:
    """POST /api/v1/admin/views/<what>: its answer, or None when the API does not answer (it reads
    the views and the stores when it starts)."""
    import httpx

    url = f"{browser_url(settings.api.host, settings.api.port, '')}/api/v1/admin/views/{what}"
    token = settings.api.admin_secret()
    try:
        answer = httpx.post(url, headers={"Authorization": f"Bearer {token}"}, timeout=API_ANSWER_S)
    except (
        httpx.ReadTimeout,
        httpx.WriteTimeout,
    ) as exc:  # it took the request and is stuck (a view module whose import hangs)
        stuck = (
            f"the API took the request to {doing} and did not answer within {API_ANSWER_S:g}s "
            f"({type(exc).__name__}): restart it (end its process, `lambdactl status` shows it; the supervisor "
            "starts it again) and run this again"
        )
        if refused_is_fatal:
            raise SystemExit(stuck) from None
        _say(stuck)
        return None
    except httpx.HTTPError as exc:
        _say(f"the API did not answer ({type(exc).__name__}): it reads the declared views when it starts")
        return None
    if answer.status_code != 200:
        refused = f"the API refused to {doing}: {answer.status_code} {answer.text[:300]}"
        if refused_is_fatal:
            raise SystemExit(refused)
        _say(refused)
        return None
    return answer.json()


def _mark_retiring(settings: Settings, maintained: list[str]) -> list[str]:
    """Before the speed layer restarts to maintain `maintained`: record in the pointer (compare-and-set)
    the storage names it maintains now but is not to — a removed view, a definition switched away
    from or abandoned before it was built — so that their realtime rows are deleted (_retire) even
    when this apply stops part-way. Returns them."""
    from lambdactl.batch import move_pointer
    from stores.checkpoints import read_marker
    from stores.pointer_moves import retiring_marked
    from stores.registry import version_store

    marker = read_marker(settings)
    dropped = sorted(set(marker.views or {}) - set(maintained)) if marker is not None else []
    if dropped:
        move_pointer(version_store(settings), lambda p: retiring_marked(p, dropped, _now_ms()))
    return dropped


def _retire(settings: Settings, maintained: list[str], dropped: Sequence[str] = ()) -> bool:
    """Drop the pointer entries of storage names no longer maintained (compare-and-set), mark
    `dropped` (_mark_retiring's) retiring again — a clean-up that ran while the speed layer restarted
    read the old marker, took them for maintained and unmarked them — then delete the realtime rows
    of every retiring one once no answer can still read them. False when some of those rows were
    left for a later clean-up."""
    from lambdactl.batch import delete_retiring, drop_unnamed_tables, move_pointer
    from stores.pointer_moves import retire
    from stores.registry import version_store

    named: list[str] = []
    pending: list[str] = []  # retiring and not maintained: their rows are deleted below, after the wait

    def without(current):
        gone = set(current.entries) - set(maintained)
        again = set(dropped) - set(maintained) - set(current.retiring)
        named[:] = sorted(gone | again)
        pending[:] = sorted((set(current.retiring) | set(named)) - set(maintained))
        return retire(current, named, _now_ms()) if named else None

    store = version_store(settings)
    if move_pointer(store, without) is not None:
        _say(f"retired {', '.join(named)}: pointer entries removed")
    if not delete_retiring(settings):
        return False
    # Their realtime rows are gone, and no answer can still read their tables (the deletion waited
    # for that): those go now, not at the next batch run's retention. Only when some name was retiring
    # and not maintained: an apply with nothing to retire changes nothing (a name declared again keeps
    # its rows; its old table, unprotected once the wait took it off the list, goes at the next one).
    if pending:
        drop_unnamed_tables(settings, store, "after the retirement")
    return True


def _now_ms() -> int:
    return int(time.time() * 1000)


def _build(settings: Settings, building: list, deadline: float) -> None:
    """The batch of the views being built, at the first complete cutoff that covers their history."""
    from batch_layer.job import choose_cutoff, iso, run_batch
    from stores.batch_views import PointerMoved
    from stores.batch_writer import VerificationError
    from stores.checkpoints import read_marker
    from stores.pointer import CutoffError, NotCoveredYet, Overtaken
    from stores.registry import version_store
    from stores.view_lifecycle import first_cutoff_ms

    names = [s.name for s in building]
    if any(s.since_ms is None for s in building):
        raise SystemExit(f"the speed layer does not maintain {names} yet: run `lambdactl views apply` again")
    marker = read_marker(settings)
    bucket_s = marker.ingest_bucket_s if marker is not None else settings.ingest_bucket_s
    needed = max(first_cutoff_ms(s.since_ms, bucket_s) for s in building)
    _say(f"building {', '.join(names)}: a batch run at a cutoff at or after {iso(needed)}")
    while True:
        try:
            cutoff = choose_cutoff(settings, None, version_store(settings).pointer(), names)
            if cutoff >= needed:
                result = run_batch(settings, cutoff, names)
                _say(f"version {result.version} serves {', '.join(names)} below {iso(result.cutoff_ms)}")
                return
        except Overtaken as exc:
            # A batch beside this one served a newer cutoff meanwhile: done if it served these views
            # from a cutoff that covers their history, else plan again from it.
            pointer = version_store(settings).pointer()
            entries = pointer.entries if pointer is not None else {}
            if all(n in entries and entries[n].cutoff_ms >= needed for n in names):
                _say(f"a batch run beside this one serves {', '.join(names)} (version {entries[names[0]].version})")
                return
            log.info("not yet: %s", exc)
        except (NotCoveredYet, PointerMoved) as exc:
            log.info("not yet: %s", exc)
        except CutoffError as exc:  # no waiting helps (a completeness marker not to trust, say)
            raise SystemExit(f"no batch run can build {', '.join(names)}: {exc}") from None
        except VerificationError as exc:
            raise SystemExit(
                f"the batch run building {', '.join(names)} failed its verification ({exc}): serving is unchanged; "
                "run `lambdactl views apply` again"
            ) from None
        if time.monotonic() > deadline:
            raise SystemExit(
                f"the master dataset did not reach {iso(needed)} in time (is the archiver running?): "
                "run `lambdactl views apply` again"
            )
        time.sleep(2.0)  # an HDFS and an HBase read a time
