"""Which views a running platform serves, builds or has retired — pure rules, no store.

The speed layer records in its checkpoint marker (stores.checkpoints) since when it maintains each
view: 0 for the views it had from its first start (it read topic `events` from the beginning), the
time of the start that added a view otherwise (records appended to Kafka after that moment reach
that process, and nothing before it is certain to). A view's merged answer is exact when every
event ingested before the realtime rows begin is in its batch part:

- **serving**: maintained since 0, or its batch table's cutoff is at or after the time it is
  maintained since;
- **building**: declared, but the speed layer does not maintain it yet, or no batch table covers
  the events ingested before the speed layer began maintaining it (`lambdactl views apply` runs
  that batch). Its answers are refused with the reason rather than given short.
- **replaying**: serving, while `lambdactl replay` writes its realtime rows again from Kafka under a
  fresh name (stores.replays); it answers from the rows it had until the replay switches to those.
- **retired**: a batch table still serves it but it is no longer declared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from definitions.times import iso_ms
from stores.pointer import Pointer

State = Literal["building", "serving", "replaying", "retired"]


@dataclass(frozen=True)
class Lifecycle:
    name: str
    state: State
    since_ms: int | None  # since when the speed layer maintains it; None: it does not
    cutoff_ms: int | None  # the cutoff of the batch table serving it; None: none
    reason: str = ""  # why it is building; empty otherwise


def maintained_since(previous: Mapping[str, int] | None, declared: Iterable[str], now_ms: int) -> dict[str, int]:
    """What the speed layer records at a start with `declared` views: a view it maintained before keeps
    its time, a new one is maintained from `now_ms`, one no longer declared is dropped (declared again
    later, it starts over). `previous` None: the first start, every view from the beginning."""
    if previous is None:
        return {name: 0 for name in declared}
    return {name: previous.get(name, now_ms) for name in declared}


def lifecycle(
    name: str,
    maintained: Mapping[str, int] | None,
    pointer: Pointer | None,
    declared: bool = True,
    replaying: Mapping[str, int] | None = None,
    changed: Iterable[str] = (),
) -> Lifecycle:
    """The state of one view. `maintained` None: the speed layer has not started yet (it will read
    topic `events` from the beginning: every view is served from its first rows). `replaying`: view →
    the time a replay of its realtime rows began at (stores.replays). `changed`: views declared with
    another definition than the one the speed layer maintains (changed_definitions): refused, not served."""
    entry = pointer.entry(name) if pointer is not None else None
    cutoff = entry.cutoff_ms if entry is not None else None
    if not declared:
        return Lifecycle(name, "retired", None, cutoff)
    since = 0 if maintained is None else maintained.get(name)
    if name in changed:
        return Lifecycle(name, "building", since, cutoff, changed_message([name]))
    if since is None:
        return Lifecycle(
            name,
            "building",
            None,
            cutoff,
            f"view {name} is being added: the speed layer does not maintain it yet (`lambdactl views apply` restarts it)",
        )
    if since == 0 or (cutoff is not None and cutoff >= since):
        if replaying and name in replaying:
            return Lifecycle(
                name,
                "replaying",
                since,
                cutoff,
                f"view {name} is being replayed: its realtime rows from {iso_ms(replaying[name])} are being written "
                "again from Kafka (`lambdactl replay`); it answers from the rows it had until the replay switches "
                "to the new ones",
            )
        return Lifecycle(name, "serving", since, cutoff)
    return Lifecycle(
        name,
        "building",
        since,
        cutoff,
        f"view {name} is being built: the speed layer maintains it since {iso_ms(since)} and no batch "
        f"version covers the events before that yet (`lambdactl views apply` runs it)",
    )


def lifecycles(
    declared: Iterable[str],
    maintained: Mapping[str, int] | None,
    pointer: Pointer | None,
    replaying: Mapping[str, int] | None = None,
    changed: Iterable[str] = (),
) -> list[Lifecycle]:
    """Every declared view's state, then the retired ones (a batch table still names them)."""
    names = list(declared)
    changed = set(changed)
    out = [lifecycle(name, maintained, pointer, replaying=replaying, changed=changed) for name in names]
    if pointer is not None:
        out += [
            lifecycle(name, maintained, pointer, declared=False)
            for name in sorted(pointer.entries)
            if name not in names
        ]
    return out


def changed_definitions(declared: Mapping[str, str], applied: Mapping[str, str] | None) -> list[str]:
    """Views declared under a name the speed layer maintains with another definition (fingerprints by
    name); none when it has not recorded its definitions."""
    if applied is None:
        return []
    return sorted(name for name, fp in declared.items() if name in applied and applied[name] != fp)


def changed_message(names: Iterable[str]) -> str:
    listed = ", ".join(names)
    return (
        f"the definition of {listed} differs from the one the speed layer maintains under that name: "
        "`lambdactl views apply` builds the new definition beside the old one, then switches to it"
    )


def first_cutoff_ms(since_ms: int, bucket_s: int) -> int:
    """The earliest batch cutoff that makes a view maintained since `since_ms` servable: the first
    ingest-bucket boundary at or after it."""
    size = bucket_s * 1000
    return -(-since_ms // size) * size
