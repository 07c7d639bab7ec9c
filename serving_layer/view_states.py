"""Each declared view's state as the API and `lambdactl status` show it: the state, batch version,
cutoff and staleness of the definition answering it (definitions.view_versions), with a new
definition being built to replace it told in `changing`; then the retired ones, and the views
refused because their served definition is unknown."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from definitions.view_versions import Versions, unresolved_message
from stores.batch_views import Pointer
from stores.pointer import NO_SOURCE, ViewSource
from stores.view_lifecycle import Lifecycle


@dataclass(frozen=True)
class ViewState:
    name: str
    version: int | None
    cutoff_ms: int
    stale: str | None  # why its answers may be missing counts (serving_layer.staleness), or None
    state: str = "serving"  # building, serving or retired (stores.view_lifecycle)
    since_ms: int | None = None  # since when the speed layer maintains it
    reason: str = ""  # why it is building
    storage: str = ""  # the storage name of the definition answering it (definitions.view_versions)
    changing: str = ""  # a changed declaration being built to replace that definition: its state


def view_states(
    versions: Versions,
    lives: list[Lifecycle],
    pointer: Pointer | None,
    stale_reason: Callable[[str, ViewSource], str | None],
) -> list[ViewState]:
    """`lives`: the lifecycle of every storage name (stores.view_lifecycle); `stale_reason`: why a
    serving storage's answers may be missing counts (serving_layer.staleness)."""
    pending = {v.name: name for name, v in versions.pending.items()}
    served = {v.name: name for name, v in versions.served.items()}
    changing = {
        pending[life.name]: f"its new definition ({life.name}) is {life.state}"
        + (f": {life.reason}" if life.reason else "")
        for life in lives
        if life.name in pending
    }
    out = []
    for life in lives:
        if life.name in pending:
            continue
        source = pointer.source(life.name) if pointer else NO_SOURCE
        stale = stale_reason(life.name, source) if life.state in ("serving", "replaying") else None
        name = served.get(life.name, life.name)
        if life.state == "retired" and life.name in versions.served:  # its storage moved to a new definition
            name = f"{life.name} (previous definition)"
        out.append(
            ViewState(
                name,
                source.version,
                source.cutoff_ms,
                stale,
                life.state,
                life.since_ms,
                life.reason,
                life.name,
                changing.get(name, ""),
            )
        )
    for name in versions.unresolved:
        reason = unresolved_message([name])
        out.append(ViewState(name, NO_SOURCE.version, NO_SOURCE.cutoff_ms, None, "building", None, reason, name))
    return out
