"""The pointer to the serving batch views, and retention's plan — pure functions, no store (the rules
that move the pointer: stores/pointer_moves.py).

The pointer holds, **per view**, the table that serves it, that table's version and the cutoff T it
covers (plus the run that wrote it and its figures). A run that recomputes some views moves only
those views' entries; the others keep theirs. Serving merges each view with its own T, the realtime
clean-up deletes each view's rows below its own T, and retention never drops a table an entry names.

Stored in the meta table's pointer row as one JSON document in one column (`p:doc`), so that moving
it is one HBase compare-and-set (Thrift1 `checkAndPut` checks and puts one column): every move
increments `generation`, a run records the generation it read when it planned its cutoff and what
it planned against (stores.pointer_moves.run_basis), and its swap succeeds if the pointer is still at that generation or
moved only in ways that left that basis as it was (another view's swap, clean-up bookkeeping) —
otherwise it fails with `PointerMoved` and changes nothing. Each swap is one compare-and-set against
the pointer as read at the swap, so no move made meanwhile is overwritten.

Rows written before per-view cutoffs (one version, one cutoff for every view: columns `p:version`,
`p:cutoff_ms`, `p:views`, ...) are still read: every view in them has that cutoff. The same legacy
columns are written after every move (the smallest cutoff, the tables), for processes still
running older code; nothing new reads them while `p:doc` exists.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

DOC = b"p:doc"
# Written beside the single-cutoff columns since the document exists: a row that has it but lacks
# the document lost it, and its single cutoff (the smallest) would make views whose own cutoff is
# later count their realtime rows in between twice.
HAS_DOC = b"p:has_doc"
FORMAT = 2
LEGACY_FIELDS = ("version", "cutoff_ms", "run_id", "views", "stats", "swapped_ms")
SERVED_STATES = ("live", "retired")  # a run in one of these states had its tables named by the pointer


class CutoffError(RuntimeError):
    """The requested cutoff cannot be served (not covered by the master dataset, or behind serving)."""


class NotCoveredYet(CutoffError):
    """The master dataset is not complete up to the cutoff yet: the archiver will get there, so
    waiting (the DAG's sensor) is the answer, unlike the other refusals."""


class PointerMoved(CutoffError):
    """Another writer moved the pointer after this run read it: this run's swap changed nothing (a
    CutoffError: the cutoff was planned against a pointer that is no longer there)."""


class Overtaken(CutoffError):
    """The cutoff is behind what serves: another run moved serving past it (or, asked for by hand,
    it was behind already). `lambdactl batch --skip-if-overtaken` tells this and PointerMoved from
    the refusals that are no other run's doing."""


class PointerFormatError(ValueError):
    """The stored pointer row cannot be read."""


# The latest time a pointer may name: 9999-12-31T23:59:59.999Z (later ones have no ISO text).
MAX_MS = 253_402_300_799_999
# What reading a stored document can raise besides the usual: a number of 400 digits as a float
# (1e400 is inf: int() overflows) or a document nested thousands deep.
READ_ERRORS = (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError)


def _whole(value: object) -> int:
    """A whole number of the pointer as stored: `int()` would cut 1.7 to 1 and read `true` as 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r} is not a whole number")
    return value


def _ms(value: object) -> int:
    """A time of the pointer (ms since the epoch), within what an ISO time can say."""
    ms = _whole(value)
    if not 0 <= ms <= MAX_MS:
        raise ValueError(f"a time of {ms} ms, outside 0..{MAX_MS}")
    return ms


@dataclass(frozen=True)
class ViewEntry:
    """What serves one view: its table, that table's version and the cutoff the table covers."""

    table: str
    version: int
    cutoff_ms: int
    run_id: str = ""
    swapped_ms: int = 0
    stats: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ViewSource:
    """What a query of one view reads: the batch table (None: no batch part yet), its version, and
    the cutoff below which realtime rows are not read."""

    table: str | None
    version: int | None
    cutoff_ms: int
    run_id: str = ""  # the run that wrote the table (a table name can come back after the stores are wiped)


NO_SOURCE = ViewSource(None, None, 0)


@dataclass(frozen=True)
class Pointer:
    entries: Mapping[str, ViewEntry] = field(default_factory=dict)
    version: int = 0  # the version of the run that last moved the pointer
    run_id: str = ""
    stats: dict = field(default_factory=dict)  # that run's figures
    swapped_ms: int = 0
    generation: int = 0  # +1 at every move
    # The `p:doc` bytes this pointer was read from (None: the row had no such column): what a
    # compare-and-set against this pointer expects to find.
    stored: bytes | None = field(default=None, compare=False, repr=False)
    # view → the storage name answering it, for a view whose answers moved to a changed definition
    # (definitions.view_versions); a view not named here is answered under its own name.
    aliases: Mapping[str, str] = field(default_factory=dict)
    # Storage names no entry serves any more whose realtime rows are still to be deleted (a retired
    # or switched-away definition, an abandoned one, a view a full run dropped): kept here, moved by
    # the same compare-and-set, until the deletion is done, so a crash part-way loses no clean-up.
    retiring: tuple[str, ...] = ()

    # --- per view --------------------------------------------------------------------------------

    def entry(self, view: str) -> ViewEntry | None:
        return self.entries.get(view)

    def source(self, view: str) -> ViewSource:
        entry = self.entries.get(view)
        return NO_SOURCE if entry is None else ViewSource(entry.table, entry.version, entry.cutoff_ms, entry.run_id)

    def cutoff_of(self, view: str) -> int:
        """The cutoff a view is served at; 0 when no batch table serves it (every realtime row counts)."""
        entry = self.entries.get(view)
        return entry.cutoff_ms if entry is not None else 0

    @property
    def views(self) -> dict[str, str]:
        """{view: table} of every entry."""
        return {name: e.table for name, e in self.entries.items()}

    @property
    def cutoff_ms(self) -> int:
        """The smallest cutoff of any view: below it every view is answered from batch tables."""
        return min((e.cutoff_ms for e in self.entries.values()), default=0)

    def tables(self) -> set[str]:
        return {e.table for e in self.entries.values()}

    def versions(self) -> set[int]:
        return {e.version for e in self.entries.values()}

    def cleanup_cutoffs_s(self) -> dict[str, int]:
        """{view: cutoff in seconds} below which each view's realtime rows are absorbed by the table
        that serves it. A view with no entry is absent: none of its rows may go."""
        return {name: e.cutoff_ms // 1000 for name, e in self.entries.items()}

    # --- storage ---------------------------------------------------------------------------------

    def to_doc(self) -> bytes:
        doc = {
            "format": FORMAT,
            "generation": self.generation,
            "version": self.version,
            "run_id": self.run_id,
            "swapped_ms": self.swapped_ms,
            "stats": self.stats,
            "views": {
                name: {
                    "table": e.table,
                    "version": e.version,
                    "cutoff_ms": e.cutoff_ms,
                    "run_id": e.run_id,
                    "swapped_ms": e.swapped_ms,
                    "stats": e.stats,
                }
                for name, e in sorted(self.entries.items())
            },
        }
        if self.aliases:
            doc["aliases"] = dict(sorted(self.aliases.items()))
        if self.retiring:
            doc["retiring"] = sorted(self.retiring)
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    def legacy_columns(self) -> dict[bytes, bytes]:
        """The single-cutoff columns older readers understand (the smallest cutoff: no older reader
        skips a realtime row a view still needs)."""
        doc = {
            "version": self.version,
            "cutoff_ms": self.cutoff_ms,
            "run_id": self.run_id,
            "views": self.views,
            "stats": self.stats,
            "swapped_ms": self.swapped_ms,
        }
        return {**{f"p:{k}".encode(): json.dumps(v).encode() for k, v in doc.items()}, HAS_DOC: b"true"}

    @classmethod
    def from_columns(cls, data: Mapping[bytes, bytes]) -> Pointer:
        """Read a pointer row: the per-view document, or else the single-cutoff format."""
        raw = data.get(DOC)
        if raw is not None:
            return cls.from_doc(raw)
        if HAS_DOC in data:
            raise PointerFormatError(
                f"pointer row lost its document {DOC.decode()}: its single-cutoff columns do not say each view's cutoff"
            )
        try:
            legacy = {k.decode()[2:]: json.loads(v) for k, v in data.items() if k.startswith(b"p:") and k != HAS_DOC}
            missing = [k for k in ("version", "cutoff_ms", "views") if k not in legacy]
            if missing:
                raise PointerFormatError(f"pointer row has neither {DOC.decode()} nor the columns {missing}")
            version, cutoff = _whole(legacy["version"]), _ms(legacy["cutoff_ms"])
            run_id, swapped = str(legacy.get("run_id", "")), _ms(legacy.get("swapped_ms", 0))
            entries = {
                name: ViewEntry(str(table), table_version(str(table)) or version, cutoff, run_id, swapped)
                for name, table in legacy["views"].items()
            }
            return cls(entries, version, run_id, dict(legacy.get("stats") or {}), swapped, generation=0, stored=None)
        except PointerFormatError:
            raise
        except READ_ERRORS as exc:
            raise PointerFormatError(f"pointer columns cannot be read: {type(exc).__name__}: {exc}"[:300]) from exc

    @classmethod
    def from_doc(cls, raw: bytes) -> Pointer:
        try:
            doc = json.loads(raw)
            entries = {
                name: ViewEntry(
                    str(e["table"]),
                    _whole(e["version"]),
                    _ms(e["cutoff_ms"]),
                    str(e.get("run_id", "")),
                    _ms(e.get("swapped_ms", 0)),
                    dict(e.get("stats") or {}),
                )
                for name, e in doc["views"].items()
            }
            return cls(
                entries,
                _whole(doc["version"]),
                str(doc.get("run_id", "")),
                dict(doc.get("stats") or {}),
                _ms(doc.get("swapped_ms", 0)),
                _whole(doc["generation"]),
                stored=bytes(raw),
                aliases={str(k): str(v) for k, v in (doc.get("aliases") or {}).items()},
                retiring=tuple(str(n) for n in doc.get("retiring") or ()),
            )
        except READ_ERRORS as exc:
            raise PointerFormatError(
                f"pointer document {DOC.decode()} cannot be read: {type(exc).__name__}: {exc}"[:300]
            ) from exc


def table_version(table: str) -> int | None:
    """N of a table named `<view>_v<N>`."""
    head, sep, tail = table.rpartition("_v")
    return int(tail) if sep and head and tail.isdigit() else None


def table_view(table: str) -> str | None:
    head, sep, tail = table.rpartition("_v")
    return head if sep and head and tail.isdigit() else None


def table_name(view: str, version: int) -> str:
    return f"{view}_v{version}"


def run_tables(version: int, run: Mapping) -> set[str]:
    return {table_name(name, version) for name in run.get("views", [])}


# --- retention -------------------------------------------------------------------------------------


def retention_plan(
    pointer: Pointer | None,
    runs: Mapping[int, Mapping],
    tables: Iterable[str],
    keep: int,
    now_ms: float,
    grace_ms: float,
    may_run: Callable[[Mapping], bool | None],
) -> list[str]:
    """The tables retention may drop: tables of this store (`<view>_v<N>` a run recorded in `runs`
    wrote: view N's run names the view) except
    - every table the pointer names (any view's entry),
    - the tables of runs in flight: "writing" with its process running (`may_run` True: asked on this
      host), or "writing" with a process that cannot be asked (None: another host) started or beating
      (batch_layer.heartbeat) within `grace_ms`, or "verified" and not yet swapped, verified within `grace_ms`,
    - per view the pointer names, its `keep` newest versions that served (live or retired, or named
      by the pointer for any view), the one serving included. A view it no longer names was retired (`lambdactl views apply`, or a full
      run after it was no longer declared nor maintained): none of its tables is kept, but its
      newest that served while the name is still retiring (its realtime clean-up, which waits
      batch.cleanup_settle_s after the retirement, has not run: an answer from the pointer before
      the retirement may still read that table)."""
    protected = set(pointer.tables()) if pointer is not None else set()
    for version, run in runs.items():
        since = max(run.get("started_ms", 0) or 0, run.get("verified_ms", 0) or 0, run.get("heartbeat_ms", 0) or 0)
        recent = now_ms - since < grace_ms
        state = run.get("state")
        running = may_run(run) if state == "writing" else False
        if running is True or (recent and (state == "verified" or running is None)):
            protected |= run_tables(version, run)
    ours = {name for run in runs.values() for name in run.get("views", [])}
    # A version the pointer names has swapped, whatever its record says (a swap whose process died
    # after the compare-and-set left its run "verified").
    named = pointer.versions() if pointer is not None else set()
    if pointer is not None:
        ours |= set(pointer.entries)
    for view in ours:
        entry = pointer.entry(view) if pointer is not None else None
        if entry is None and pointer is not None:  # retired: declared again, it is built anew
            if view in pointer.retiring:
                served = [v for v, r in runs.items() if (r.get("state") in SERVED_STATES or v in named)]
                newest = max((v for v in served if view in runs[v].get("views", [])), default=None)
                if newest is not None:
                    protected.add(table_name(view, newest))
            continue
        served = sorted(
            (
                v
                for v, r in runs.items()
                if (r.get("state") in SERVED_STATES or v in named)
                and view in r.get("views", [])
                and (entry is None or v != entry.version)
            ),
            reverse=True,
        )
        protected |= {table_name(view, v) for v in served[: keep - (entry is not None)]}
    # Only tables this store's own runs made: a `<view>_v<N>` no run record of it names is another
    # meta table's sharing the namespace, or a run's beyond a counter restored from a backup (its
    # next run refuses to create over it: stores.batch_writer), never this store's to drop.
    made = set().union(*(run_tables(version, run) for version, run in runs.items()))
    return sorted(t for t in tables if t in made and t not in protected)
