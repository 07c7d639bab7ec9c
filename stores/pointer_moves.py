"""The rules that move the pointer (stores/pointer.py) — pure functions, no store: whether a run's
cutoff is behind what serves (behind), a run's swap (advance), retiring views, switching a view to
a changed definition, and what a run planned against (run_basis), which its swap's compare-and-set
checks (check_unmoved)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from definitions.times import iso_ms as iso
from stores.pointer import CutoffError, Overtaken, Pointer, PointerMoved, ViewEntry, table_name

# --- moving the pointer ------------------------------------------------------------------------------


def behind(current: Pointer | None, views: Iterable[str], cutoff_ms: int) -> list[str]:
    """The views among `views` whose serving cutoff is past `cutoff_ms` (a run at it would go back)."""
    if current is None:
        return []
    return [
        f"{name} (version {e.version}, cutoff {iso(e.cutoff_ms)})"
        for name in views
        if (e := current.entry(name)) is not None and e.cutoff_ms > cutoff_ms
    ]


def advance(
    current: Pointer | None,
    *,
    version: int,
    run_id: str,
    cutoff_ms: int,
    views: Iterable[str],
    full: bool,
    stats: dict,
    now_ms: int,
    maintained: Iterable[str] | None = (),
) -> Pointer:
    """The pointer after run `version` (cutoff `cutoff_ms`) recomputed `views`: their entries name its
    tables; every other view keeps its entry — unless the run was `full` (every declared view), which
    also drops the entries of views no longer declared, but not of those among `maintained` (storage
    names the speed layer still maintains; None: unknown, all of them): until `lambdactl views apply`
    stops maintaining a view, the API answers it, and without its entry an answer would lack every
    event below its old cutoff. A view's cutoff never goes back."""
    views = list(views)
    late = behind(current, views, cutoff_ms)
    if late:
        raise Overtaken(f"version {version} (cutoff {iso(cutoff_ms)}) is behind what serves " + ", ".join(late))
    if current is None:
        entries = {}
    elif full:
        keep = set(current.entries) if maintained is None else set(maintained)
        entries = {name: e for name, e in current.entries.items() if name in keep}
    else:
        entries = dict(current.entries)
    tables = stats.get("tables", {}) if isinstance(stats, dict) else {}
    for name in views:
        entries[name] = ViewEntry(
            table_name(name, version),
            version,
            cutoff_ms,
            run_id,
            now_ms,
            {"events": stats.get("events"), **tables.get(name, {})} if stats else {},
        )
    generation = (current.generation if current else 0) + 1
    aliases = dict(current.aliases) if current else {}
    retiring = set(current.retiring) if current else set()
    if full and current is not None:  # what the run dropped is retired: its rows go, its alias too
        dropped = set(current.entries) - set(entries)
        retiring |= dropped
        aliases = {view: storage for view, storage in aliases.items() if storage in entries}
    retiring -= set(views)  # written again: live, not retiring
    # The run's verification cuts stay in its run record: every reader of the pointer would fetch them.
    figures = {k: v for k, v in stats.items() if k != "splits"} if isinstance(stats, dict) else stats
    return Pointer(
        entries, version, run_id, figures, now_ms, generation, aliases=aliases, retiring=tuple(sorted(retiring))
    )


def retire(current: Pointer, views: Iterable[str], now_ms: int) -> Pointer:
    """The pointer without the entries of `views` (views no longer declared): their answers and
    realtime clean-up stop; their tables are left to retention (no entry names them any more). An
    alias to a retired storage name goes too: a view declared again later is built anew under its
    own name."""
    gone = set(views)
    entries = {name: e for name, e in current.entries.items() if name not in gone}
    aliases = {view: storage for view, storage in current.aliases.items() if storage not in gone}
    return _moved(current, now_ms, entries=entries, aliases=aliases, retiring=(*current.retiring, *gone))


def retiring_marked(current: Pointer, names: Iterable[str], now_ms: int) -> Pointer | None:
    """The pointer with `names` added to its retiring storage names (None: they all are already)."""
    added = set(names) - set(current.retiring)
    return _moved(current, now_ms, retiring=(*current.retiring, *added)) if added else None


def retiring_done(current: Pointer, names: Iterable[str], now_ms: int) -> Pointer | None:
    """The pointer once the realtime rows of `names` are deleted (or they are maintained again); None
    when none of them is retiring (any more): a write would move the pointer for nothing, and a
    batch planned against it would lose its swap."""
    done = set(names) & set(current.retiring)
    return _moved(current, now_ms, retiring=[n for n in current.retiring if n not in done]) if done else None


def retiring_now(current: Pointer, maintained: Iterable[str], replaying: Iterable[str]) -> tuple[list[str], list[str]]:
    """The retiring storage names whose realtime rows can be deleted now (no entry serves them, the
    speed layer does not maintain them, no replay writes them: a replay that began before the
    retirement holds its mark until its last write), and those maintained again (simply no longer
    retiring). A name held by a replay stays retiring for a later clean-up."""
    kept, held = set(maintained), set(replaying)
    again = [n for n in current.retiring if n in kept]
    todo = [n for n in current.retiring if n not in kept and n not in held and n not in current.entries]
    return todo, again


def _moved(current: Pointer, now_ms: int, **changes) -> Pointer:
    """`current` with `changes`, one generation on (retiring: sorted, no name twice)."""
    if "retiring" in changes:
        changes["retiring"] = tuple(sorted(set(changes["retiring"])))
    return replace(current, swapped_ms=now_ms, generation=current.generation + 1, stored=None, **changes)


def switch(current: Pointer, view: str, storage: str, now_ms: int) -> Pointer:
    """The pointer with `view` answered from `storage` (a changed definition's storage name, which must
    have a batch table): one compare-and-set moves every reader from the old definition to the new."""
    if current.entry(storage) is None:
        raise CutoffError(f"view {view} cannot switch to {storage}: no batch table serves {storage} yet")
    aliases = {k: v for k, v in current.aliases.items() if k != view}
    if storage != view:
        aliases[view] = storage
    previous = current.aliases.get(view, view)  # its rows go once no answer can read them
    return _moved(current, now_ms, aliases=aliases, retiring=(*current.retiring, previous))


def run_basis(current: Pointer | None, views: Iterable[str], full: bool) -> dict:
    """What a run computing `views` (every declared view: `full`) plans against, as JSON: the entries
    of its views (of every view for a full run, whose swap drops the others), the aliases, and which
    of its views are retiring. A move that leaves these as they were cannot change what its swap
    does: check_unmoved lets the swap go on (for a run whose every view had an entry)."""
    names = set(views)
    entries = current.entries if current is not None else {}
    kept = {n: e for n, e in entries.items() if full or n in names}
    return {
        "views": sorted(names),
        "full": full,
        "entries": {n: [e.table, e.version, e.cutoff_ms] for n, e in sorted(kept.items())},
        "aliases": dict(sorted(current.aliases.items())) if current is not None else {},
        "retiring": sorted(names & set(current.retiring)) if current is not None else [],
    }


def check_unmoved(current: Pointer | None, based_on: int | None, version: int, basis: Mapping | None = None) -> None:
    """Raise PointerMoved unless the pointer is still at the generation run `version` read, or moved
    only in ways that leave its `basis` (run_basis, as read) as it was."""
    now = current.generation if current is not None else 0
    if based_on is not None and based_on == now:
        return
    if basis is not None and based_on is not None and _same_basis(current, basis):
        return
    moved = (
        "nothing"
        if current is None
        else (
            f"generation {now}: version {current.version} (run {current.run_id or '?'}) swapped at "
            f"{iso(current.swapped_ms)}"
        )
    )
    read = "an unknown generation (a run recorded by older code)" if based_on is None else f"generation {based_on}"
    raise PointerMoved(
        f"the pointer moved since this run read it: version {version} was planned against "
        f"{read}, the pointer now holds {moved}. Nothing was changed; run the batch again "
        f"to recompute on top of the pointer as it is now."
    )


def _same_basis(current: Pointer | None, basis: Mapping) -> bool:
    if not isinstance(basis, Mapping):
        return False  # not a basis this code wrote: refused as if it had none
    views, full, entries = basis.get("views"), basis.get("full"), basis.get("entries")
    if not isinstance(views, list) or not isinstance(full, bool) or not isinstance(entries, dict):
        return False
    # A view no entry served at the plan may have been retired and cleaned up since, leaving no
    # trace in the basis: such a run swaps only on the generation it read.
    if any(view not in entries for view in views):
        return False
    return run_basis(current, views, full) == basis
