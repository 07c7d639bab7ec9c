"""Which definition answers a query of a changed view, at the moment of the switch (pure rules).

A route is made from the definition that served its view when the API last read the declared views
(definitions.view_versions). `lambdactl views apply` switches a view to its new definition by
moving the pointer's alias (one compare-and-set), then has the API read the views again. A query
answered in between reads a pointer that names the new storage: it is answered from the new
definition when its route can (same keys, layout and aggregation, and the granularity asked for is
kept), and otherwise refused with a retry (409), never from the old definition: once one answer
came from the new definition, no later one comes from the old."""

from __future__ import annotations

from definitions.view_versions import SEPARATOR, Versions
from definitions.views import View
from stores.pointer import Pointer


class Switched(RuntimeError):
    """The view switched to a definition this route cannot answer: the API takes it up in a moment."""


class UnknownAlias(ValueError):
    """The pointer's alias of a view names no storage of that view: no reload of the views helps."""


def answering_view(versions: Versions, view: View, pointer: Pointer | None, granularity: str) -> View:
    """The storage view to answer a query of the route made for `view` (a storage view), given the
    pointer the answer is read from."""
    public = versions.public(view.name)
    if public == view.name and public not in versions.served:  # the route of a view no longer declared
        return view
    target = pointer.aliases.get(public, public) if pointer is not None else public
    if target != public and not target.startswith(public + SEPARATOR):
        raise UnknownAlias(f"the pointer's alias of view {public} names {target[:100]!r}, no storage of it")
    for candidate in (versions.served.get(public), versions.pending.get(public)):
        if candidate is not None and candidate.name == target:
            if (
                candidate.keys == view.keys
                and candidate.layout == view.layout
                and candidate.aggregation == view.aggregation
                and granularity in candidate.granularities
            ):
                return candidate  # the definition stored under `target`, whatever the route was made from
            break
    else:
        if target == view.name:  # versions that do not know `target` (made without the stores)
            return view
    raise Switched(
        f"view {public} has just switched to its new definition ({target}); the API takes it up within "
        "seconds: ask again"
    )
