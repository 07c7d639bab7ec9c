"""Batch view versions in HBase: the version counter, run records, the pointer, retention.

The pointer row is the only thing serving reads to choose a version. A run writes its own
tables, verifies them, and only then moves the pointer with one single-row put (atomic in HBase):
readers see the old version or the new one, never a mix. A run that dies leaves the pointer
where it was; its tables are dropped by a later run's retention pass.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field

from batch_layer import layout
from definitions.clients import hbase_connection
from definitions.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pointer:
    version: int
    cutoff_ms: int
    run_id: str
    views: dict[str, str] = field(default_factory=dict)  # view name -> table
    stats: dict = field(default_factory=dict)
    swapped_ms: int = 0

    def to_columns(self) -> dict[bytes, bytes]:
        doc = asdict(self)
        return {f"p:{k}".encode(): json.dumps(v).encode() for k, v in doc.items()}

    @classmethod
    def from_columns(cls, data: dict[bytes, bytes]) -> "Pointer":
        doc = {k.decode()[2:]: json.loads(v) for k, v in data.items() if k.startswith(b"p:")}
        return cls(**{k: doc[k] for k in ("version", "cutoff_ms", "run_id", "views", "stats", "swapped_ms") if k in doc})


class VersionStore:
    """Reads and moves the pointer, records runs, allocates versions, drops old tables."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def _meta(self, conn):
        return conn.table(self.settings.hbase.meta_table)

    def pointer(self) -> Pointer | None:
        conn = hbase_connection(self.settings)
        try:
            data = self._meta(conn).row(layout.POINTER_ROW)
            return Pointer.from_columns(data) if data else None
        finally:
            conn.close()

    def allocate_version(self) -> int:
        conn = hbase_connection(self.settings)
        try:
            return self._meta(conn).counter_inc(layout.COUNTER_ROW, layout.VERSION_COUNTER)
        finally:
            conn.close()

    def record_run(self, version: int, **fields) -> None:
        conn = hbase_connection(self.settings)
        try:
            self._meta(conn).put(layout.run_row(version), {f"p:{k}".encode(): json.dumps(v).encode() for k, v in fields.items()})
        finally:
            conn.close()

    def runs(self) -> dict[int, dict]:
        conn = hbase_connection(self.settings)
        try:
            out = {}
            for row, data in self._meta(conn).scan(row_prefix=b"run:"):
                out[int(row[4:])] = {k.decode()[2:]: json.loads(v) for k, v in data.items()}
            return out
        finally:
            conn.close()

    def swap(self, pointer: Pointer) -> None:
        """Move serving to `pointer`'s version: one atomic single-row put."""
        previous = self.pointer()
        conn = hbase_connection(self.settings)
        try:
            pointer = Pointer(**{**asdict(pointer), "swapped_ms": int(time.time() * 1000)})
            self._meta(conn).put(layout.POINTER_ROW, pointer.to_columns())
        finally:
            conn.close()
        self.record_run(pointer.version, state="live", swapped_ms=pointer.swapped_ms)
        if previous is not None and previous.version != pointer.version:
            self.record_run(previous.version, state="retired")
        log.info("pointer moved to version %d (cutoff %d)", pointer.version, pointer.cutoff_ms)

    def retain(self, keep: int, grace_ms: int = 3_600_000) -> list[str]:
        """Keep the tables of the `keep` newest versions that served (the live one included);
        drop every other view table, except those of a run started within `grace_ms` that may
        still be writing."""
        current = self.pointer()
        runs = self.runs()
        served = sorted((v for v, r in runs.items() if r.get("state") in ("live", "retired")), reverse=True)
        kept = set(served[:keep]) | ({current.version} if current else set())
        now_ms = time.time() * 1000
        # Only tables this store made: <view>_v<N> for a view some run wrote.
        ours = {name for run in runs.values() for name in run.get("views", [])}
        conn = hbase_connection(self.settings)
        dropped = []
        try:
            for raw in conn.tables():  # names relative to the namespace
                name = raw.decode()
                version = _version_of(name)
                if version is None or version in kept or name.rpartition("_v")[0] not in ours:
                    continue
                run = runs.get(version, {})
                if run.get("state") == "writing" and now_ms - run.get("started_ms", 0) < grace_ms and _may_run(run):
                    continue
                conn.delete_table(name, disable=True)
                dropped.append(name)
            for version in served[keep:]:
                if version not in kept:
                    self.record_run(version, state="dropped")
        finally:
            conn.close()
        if dropped:
            log.info("dropped old view tables: %s", ", ".join(dropped))
        return dropped


def _may_run(run: dict) -> bool:
    """Whether the process of a run in state "writing" may still be alive."""
    import socket

    import psutil

    if run.get("host") != socket.gethostname() or not run.get("pid"):
        return True  # another machine's run: trust the grace period
    try:
        return abs(psutil.Process(run["pid"]).create_time() * 1000 - run.get("pid_started_ms", 0)) < 2_000
    except psutil.Error:
        return False


def _version_of(table: str) -> int | None:
    head, sep, tail = table.rpartition("_v")
    return int(tail) if sep and head and tail.isdigit() else None
