"""Versions of a view's definition: which definition answers a view's queries, which one is being
built to replace it, and what the speed and batch layers compute — pure rules, no store.

A view's rows are stored under a *storage name*: its own name for the definition it was first
added with, `<name>__<fingerprint prefix>` for a definition it was changed to. The speed layer
records the definition it maintains under each storage name (stores.checkpoints); the pointer
records which storage name answers a view whose answers moved to a changed definition (its
`aliases`, moved by a compare-and-set like a batch swap: the switch is atomic).

When a declaration differs from the definition that answers the view, both are computed: the
served one under its storage name, the declared one under a new storage name (pending). The view
keeps answering from the served definition until the pending one is exact (maintained by the speed
layer and covered by a batch table), then `lambdactl views apply` switches the alias and the
served storage is retired.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from definitions.views import Registry, View

SEPARATOR = "__"


def storage_name(name: str, fingerprint: str) -> str:
    """The storage name of a changed definition of view `name`."""
    return f"{name}{SEPARATOR}{fingerprint[:8]}"


@dataclass(frozen=True)
class Versions:
    maintained: Registry  # views under their storage names: what the speed and batch layers compute
    served: Mapping[str, View] = field(default_factory=dict)  # view name → its storage view answering it
    pending: Mapping[str, View] = field(default_factory=dict)  # view name → the storage view replacing it
    # Views whose definition changed while the speed layer recorded only its fingerprint, not the
    # definition (a marker of older code): the served definition is unknown, so they are refused
    # (in `served` under the declared definition, for their route; in no layer's `maintained`).
    unresolved: tuple[str, ...] = ()

    def public(self, storage: str) -> str:
        """The view a storage name belongs to (itself when it is no storage name of a declared view)."""
        for name, view in (*self.served.items(), *self.pending.items()):
            if view.name == storage:
                return name
        head, sep, _ = storage.rpartition(SEPARATOR)
        if sep and head in self.served:  # a definition the view had before
            return head
        return storage

    def storages(self, names: list[str]) -> list[str]:
        """The storage names computed for `names` (view names — served and pending storage — or
        storage names themselves); KeyError naming an unknown one."""
        known = set(self.maintained.names())
        out: list[str] = []
        for name in names:
            if name in self.served:
                found = [self.served[name].name] + ([self.pending[name].name] if name in self.pending else [])
            elif name in known:
                found = [name]
            else:
                raise KeyError(name)
            out += [s for s in found if s not in out]
        return out


def resolve(
    declared: Registry,
    aliases: Mapping[str, str] | None = None,
    recorded: Mapping[str, View] | None = None,
    fingerprints: Mapping[str, str] | None = None,
) -> Versions:
    """The versions of the `declared` views. `aliases`: view → the storage name answering it, when not
    its own name (the pointer's); `recorded`: storage name → the definition the speed layer maintains
    under it; `fingerprints`: storage name → that definition's fingerprint (recorded by older
    markers without the definitions)."""
    aliases = aliases or {}
    recorded = recorded or {}
    fingerprints = fingerprints or {}
    maintained: list[View] = []
    served: dict[str, View] = {}
    pending: dict[str, View] = {}
    unresolved: list[str] = []
    for view in declared:
        storage = aliases.get(view.name, view.name)
        current = recorded.get(storage)
        if current is None and storage in fingerprints and fingerprints[storage] != view.fingerprint:
            unresolved.append(view.name)  # its route stays, refusing with the reason; nothing computes it
            served[view.name] = replace(view, name=storage)
            continue
        if current is None or current.fingerprint == view.fingerprint:
            served[view.name] = replace(view, name=storage)
            maintained.append(served[view.name])
            continue
        served[view.name] = replace(current, name=storage, description=view.description)
        new = storage_name(view.name, view.fingerprint)
        if new == storage:  # a fingerprint prefix collision: a full fingerprint tells them apart
            new = f"{view.name}{SEPARATOR}{view.fingerprint}"
        pending[view.name] = replace(view, name=new)
        maintained += [served[view.name], pending[view.name]]
    return Versions(Registry(tuple(maintained)), served, pending, tuple(unresolved))


def unresolved_message(names: list[str] | tuple[str, ...]) -> str:
    listed = ", ".join(names)
    return (
        f"the definition of {listed} differs from the one the speed layer maintains, and the speed layer "
        "recorded only its fingerprint (it was started by an older version): the definition to keep "
        "serving meanwhile is unknown. Restore the declaration, or remove the view and add it again"
    )
