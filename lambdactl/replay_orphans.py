"""Rows of replays that no replay mark names any more, deleted by the realtime clean-up.

A replay writes a view's rows under a fresh storage name (stores.replays: its shadow). Its rows are
deleted by the replay that replaces it, by the clean-up once the view's cutoff passes its split, or
by `lambdactl replay --cancel`; but a cancel that could not reach Cassandra, a replay refused at its
switch (its claim was cancelled meanwhile), and a replay killed in the wait before it deletes the
rows it replaced leave rows that no mark names (unreferenced_shadows).

No replay can switch to such rows any more, but an API worker may still answer from replay marks it
read just before they stopped naming them; every worker reads the marks again within
`replaced_rows_kept_s` or refuses the view (serving_layer/speed_state.py). So the rows are deleted
only if no mark names them when read after the scan that found them and again that long after.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from definitions.settings import Settings
from lambdactl.output import _say
from serving_layer.speed_state import replaced_rows_kept_s
from stores.replays import SHADOW_SEPARATOR, ReplayMark, shadow_name

_SHADOW = re.compile(r"(?P<view>[^./~]{1,200})" + re.escape(SHADOW_SEPARATOR) + r"(?P<started>[0-9]{1,16})")


def unreferenced_shadows(
    names: Iterable[str],
    claims: dict[str, ReplayMark],
    overlays: dict[str, ReplayMark],
    claims_being_written: Iterable[str] = (),
) -> set[str]:
    """The replays' rows (shadow names) among `names` that no mark refers to: no claim is theirs or
    took theirs over (a `--resume`'s `replaces`), and no view's newest overlay reads them. No replay
    can switch to them any more, and an answer reads them only from marks read before that held
    (lambdactl/replay_orphans.py waits those out). Left by a `--cancel` that could not delete them,
    a replay refused at its switch, a switch killed before it deleted the overlays it replaced, or
    a replay killed before it deleted the rows it replaced. A view whose claim file is no mark, or
    is empty (`claims_being_written`: read_replays_and_empty_claims, from the same listing as the
    marks), keeps all its replays' rows: a replay still running may switch under such a file."""
    referenced = {m.shadow for m in overlays.values() if m.shadow}
    for held in claims.values():
        referenced.update(shadow_name(held.view, t) for t in (held.started_ms, *held.replaces))
    unreadable = {view for view, held in claims.items() if held.unreadable} | set(claims_being_written)
    found = set()
    for name in names:
        parts = _SHADOW.fullmatch(name)
        if parts is not None and name not in referenced and parts["view"] not in unreadable:
            found.add(name)
    return found


@dataclass
class Orphans:
    names: list[str] = field(default_factory=list)  # the replays whose rows were deleted
    rows: int = 0
    complete: bool = True  # False: some token range could not be read (a later clean-up goes on)
    error: str = ""  # why the pass did not run to its end

    def as_json(self) -> dict:
        doc: dict = {"names": self.names, "rows": self.rows, "complete": self.complete and not self.error}
        return {**doc, "error": self.error} if self.error else doc


def delete_orphaned_replays(
    settings: Settings,
    seen: Iterable[str],
    settle_s: float | None = None,
    wait: Callable[[float], None] = time.sleep,
) -> Orphans:
    """Delete every row of the replays among the storage names `seen` (by a scan that ended before
    this call) that no replay mark names now and again `settle_s` later (replaced_rows_kept_s by
    default), in one pass."""
    settle_s = replaced_rows_kept_s(settings) if settle_s is None else settle_s
    from stores.realtime_cleanup import delete_absorbed
    from stores.replays import read_replays_and_empty_claims

    def unreferenced(names: Iterable[str]) -> set[str]:  # claims, overlays and empty claims of one listing
        return unreferenced_shadows(names, *read_replays_and_empty_claims(settings))

    candidates = unreferenced(seen)
    if not candidates:
        return Orphans()
    _say(
        f"{len(candidates)} replay(s) no mark names left rows ({', '.join(sorted(candidates)[:5])}): deleting them "
        f"in {settle_s:.0f}s, once no API worker answers from marks that named them"
    )
    wait(settle_s)
    orphans = sorted(unreferenced(candidates))
    if not orphans:
        return Orphans()
    everything = int(time.time()) + 366 * 86_400  # past any ingest bucket a realtime row can have
    cleanup = delete_absorbed(settings, dict.fromkeys(orphans, everything))
    return Orphans(orphans, cleanup.rows_below_cutoff, cleanup.complete)
