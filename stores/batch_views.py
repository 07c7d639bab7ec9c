"""Batch view versions in HBase: the version counter, run records, the pointer, retention.

The pointer row is the only thing serving reads to choose, per view, a table and its cutoff
(stores/pointer.py: the format and the rules). A run writes its own tables, verifies them, and
only then moves the pointer with one HBase compare-and-set (Thrift1 `checkAndPut` on the pointer
document's column): readers see the old entries or the new ones, never a mix, and of two runs
of one view that read the same pointer only the first to swap moves it — the other fails with
PointerMoved and changes nothing (stores.pointer_moves.check_unmoved says which moves a swap survives). A run that dies leaves the pointer where it was; its tables are dropped by a later
run's retention pass.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping

from definitions.settings import Settings
from definitions.times import iso_ms as iso
from stores import batch_layout as layout
from stores.adapters import RetentionIncomplete
from stores.clients import hbase_connection
from stores.pointer import (
    DOC,
    CutoffError,
    NotCoveredYet,
    Pointer,
    PointerFormatError,
    PointerMoved,
    ViewEntry,
    retention_plan,
    run_tables,
    table_version,
)
from stores.run_records import prunable_runs

__all__ = ["CutoffError", "NotCoveredYet", "Pointer", "PointerFormatError", "PointerMoved", "VersionStore", "ViewEntry"]

log = logging.getLogger(__name__)

META_FAMILIES = {"p": dict(max_versions=1)}


class NamespaceMissing(RuntimeError):
    """The platform's HBase namespace does not exist (Thrift1 cannot create one: infra/bootstrap does)."""


def ensure_meta_table(settings: Settings) -> bool:
    """Create the meta table (the pointer, the version counter, run records) if missing; True if it
    was created. Raises NamespaceMissing when the namespace must be created first."""
    b = settings.hbase
    # Creating the first table of a fresh HBase (namespace, region assignment) can take well over
    # the default 10 s client timeout on a busy machine.
    conn = hbase_connection(settings, timeout_s=120)
    try:
        if b.meta_table.encode() in conn.tables():
            return False
        try:
            conn.create_table(b.meta_table, META_FAMILIES)
        except Exception as exc:  # Thrift IOError carries HBase's exception text
            if "NamespaceNotFound" in str(exc):
                raise NamespaceMissing(b.namespace) from exc
            raise
        log.info("created HBase table %s:%s", b.namespace, b.meta_table)
        return True
    finally:
        conn.close()


# Run records deleted in one retention pass from which it asks HBase to compact the meta table.
COMPACT_AFTER = 100


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
            self._meta(conn).put(
                layout.run_row(version), {f"p:{k}".encode(): json.dumps(v).encode() for k, v in fields.items()}
            )
        finally:
            conn.close()

    def record_run_if(self, version: int, expected: str, /, **fields) -> bool:
        """Set these fields of run `version`'s record only while its state is `expected`: an HBase
        checkAndPut on the state of each field, then, if `fields` has a new state, a checkAndPut of
        it last: a writer killed on the way leaves its fields under the old
        state (it writes them again when run again), never a record in the new state without them
        (a "verified" run without its figures). False when the state is not `expected`, at the
        first checkAndPut (nothing changed) or at a later one (the fields before it written): retention
        gave the run up (stores.run_records) and may have deleted its record, which a plain put
        would bring back half made."""
        from Hbase_thrift import Mutation  # the IDL happybase loads declares checkAndPut

        cells = {f"p:{k}".encode(): json.dumps(v).encode() for k, v in fields.items()}
        state = cells.pop(b"p:state", None)
        conn = hbase_connection(self.settings)
        try:
            meta = self._meta(conn)
            row = layout.run_row(version)

            def put_if(column: bytes, value: bytes) -> bool:
                mutation = Mutation(column=column, value=value)
                return conn.client.checkAndPut(meta.name, row, b"p:state", json.dumps(expected).encode(), mutation, {})

            for column, value in cells.items():  # each only while it is: a plain put brought a deleted record back
                if not put_if(column, value):
                    return False
            return state is None or put_if(b"p:state", state)
        finally:
            conn.close()

    def runs(self) -> dict[int, dict]:
        conn = hbase_connection(self.settings)
        try:
            out = {}
            for row, data in self._meta(conn).scan(row_prefix=b"run:"):
                try:  # a row the platform did not write is passed over (it would fail every swap)
                    version = int(row[4:]) if row[4:].isdigit() else -1
                    fields = {k.decode()[2:]: json.loads(v) for k, v in data.items()}
                except ValueError:  # UnicodeDecodeError and JSONDecodeError included
                    version = -1
                if version < 0:
                    log.warning("meta table row %r is no run record: passed over", row[:80])
                    continue
                out[version] = fields
            return out
        finally:
            conn.close()

    def compare_and_set(self, expected: Pointer | None, new: Pointer) -> None:
        """Store `new` if the pointer row still holds exactly what `expected` was read from (no
        pointer document at all when `expected` is None or of the single-cutoff format); else raise
        PointerMoved and change nothing. One HBase checkAndPut: atomic on the server."""
        from Hbase_thrift import Mutation  # the IDL happybase loads declares checkAndPut

        conn = hbase_connection(self.settings)
        try:
            meta = self._meta(conn)
            swapped = conn.client.checkAndPut(
                meta.name,
                layout.POINTER_ROW,
                DOC,
                expected.stored if expected is not None else None,
                Mutation(column=DOC, value=new.to_doc()),
                {},
            )
            if not swapped:
                data = meta.row(layout.POINTER_ROW)
                now = Pointer.from_columns(data) if data else None
                found = (
                    "no pointer"
                    if now is None
                    else (
                        f"generation {now.generation}: version {now.version} (run {now.run_id or '?'}) swapped at "
                        f"{iso(now.swapped_ms)}"
                    )
                )
                raise PointerMoved(
                    f"the pointer moved since this run read it: version {new.version} expected "
                    f"generation {expected.generation if expected else 0}, found {found}. Nothing was "
                    f"changed; run the batch again to recompute on top of the pointer as it is now."
                )
            # For readers still running the single-cutoff code; nothing new reads these columns, and
            # the swap is done whether they are written or not.
            try:
                meta.put(layout.POINTER_ROW, new.legacy_columns())
            except Exception as exc:
                log.warning("the pointer moved; its single-cutoff columns were not written (%s)", type(exc).__name__)
        finally:
            conn.close()

    def swap(self, current: Pointer | None, new: Pointer) -> None:
        """Move serving from `current` (as read) to `new`, then record which runs serve: a run that
        now serves, with when its swap landed (`swap_landed_ms`, after the compare-and-set returned:
        the pointer's `swapped_ms` is stamped before it, and a slow connection or compare-and-set
        landed it later; the clean-up's settle counts from the later). A move that keeps the version
        (retiring bookkeeping, a switch) records nothing for it: it re-marked a dropped run live."""
        self.compare_and_set(current, new)
        landed_ms = int(time.time() * 1000)
        try:  # the swap is done: records that fail now (a Thrift timeout) do not undo it
            if current is None or new.version != current.version:
                self.record_run(new.version, state="live", swapped_ms=new.swapped_ms, swap_landed_ms=landed_ms)
            for version in (current.versions() if current is not None else set()) - new.versions():
                self.record_run(version, state="retired")
        except Exception as exc:
            log.warning(
                "version %d serves (the pointer moved), but its run records were not all updated (%s: %s); "
                "while its own still says verified, `lambdactl batch --swap %d` records them (the others "
                "only say which runs served: retention keeps what the pointer names either way)",
                new.version,
                type(exc).__name__,
                exc,
                new.version,
            )
        moved = sorted(name for name, e in new.entries.items() if e.version == new.version)
        cutoff = new.entries[moved[0]].cutoff_ms if moved else 0
        log.info(
            "pointer generation %d: version %d serves %s below %s",
            new.generation,
            new.version,
            ", ".join(moved),
            iso(cutoff),
        )

    def tables(self) -> list[str]:
        """The tables of the namespace (names relative to it)."""
        conn = hbase_connection(self.settings)
        try:
            return [raw.decode() for raw in conn.tables()]
        finally:
            conn.close()

    def retain(self, keep: int, grace_ms: int | None = None) -> list[str]:
        """Per view keep the tables of the `keep` newest versions that served (the serving one
        included); never drop a table the pointer names, one a run still writing on this host
        writes, nor one a run may be writing elsewhere or is about to swap (started or verified
        within `grace_ms`, default `batch.retention_grace_s`); drop every other table of this
        store's views. Then delete the run records nothing reads any more, beyond the
        `batch.keep_runs` newest (stores.run_records)."""
        if grace_ms is None:
            grace_ms = self.settings.batch.retention_grace_s * 1000
        # Tables, then runs, then the pointer: a table listed was recorded by its run before it was
        # made, and a run that swaps meanwhile has its tables named by the pointer read last.
        tables = self.tables()
        runs = self.runs()
        current = self.pointer()
        dropped: list[str] = []
        try:
            return self._retain(keep, grace_ms, tables, runs, current, dropped)
        except Exception as exc:
            if not dropped:
                raise
            raise RetentionIncomplete(
                f"retention failed ({type(exc).__name__}: {str(exc)[:300]}) after dropping {', '.join(dropped)}",
                dropped,
            ) from exc

    def _retain(self, keep: int, grace_ms: int, tables, runs, current, dropped: list[str]) -> list[str]:
        """retain's drops and record updates, each table dropped added to `dropped` as it goes."""
        conn = hbase_connection(self.settings)
        try:
            for name in retention_plan(current, runs, tables, keep, time.time() * 1000, grace_ms, _may_run):
                try:
                    conn.delete_table(name, disable=True)
                except Exception as exc:  # another swap's retention dropped it first, or HBase failed
                    if name.encode() in conn.tables():
                        log.warning("could not drop old view table %s (%s); the next swap tries again", name, exc)
                        continue
                dropped.append(name)
        finally:
            conn.close()
        made = set().union(*(run_tables(version, run) for version, run in runs.items()))
        remaining = {v for t in set(tables) - set(dropped) if t in made and (v := table_version(t)) is not None}
        named = {e.version for e in current.entries.values()} if current is not None else set()
        for version, run in runs.items():
            # A version the pointer names stays live even with its table gone (deleted outside the
            # platform): the next run at its cutoff computes it again (batch_layer.job).
            if run.get("state") in ("live", "retired") and version not in remaining and version not in named:
                self.record_run(version, state="dropped")
        if dropped:
            log.info("dropped old view tables: %s", ", ".join(dropped))
        # Versions with a table left that their own run made (a table of another view, or of
        # another meta table's runs sharing the namespace, is no run's of this store).
        self._prune_runs(
            prunable_runs(
                runs, current, remaining, self.settings.batch.keep_runs, time.time() * 1000, grace_ms, _may_run
            )
        )
        return dropped

    def _prune_runs(self, versions: list[int]) -> None:
        """Delete these run records (stores.run_records: ones nothing reads any more); a failure
        leaves them for the next retention pass."""
        if not versions:
            return
        conn = hbase_connection(self.settings)
        try:
            meta = self._meta(conn)
            with meta.batch(batch_size=500) as batch:
                for version in versions:
                    batch.delete(layout.run_row(version))
            log.info("deleted %d old run records (versions %d to %d)", len(versions), versions[0], versions[-1])
            if len(versions) >= COMPACT_AFTER:
                # A scan reads over deleted rows until a major compaction drops them (HBase's own
                # comes weekly): 500 records read as slowly with 8,260 deleted ones beside them as
                # 8,760 did (bench/run_records.py). The table is small; HBase compacts it in the
                # background. A pass deleting a few leaves them to HBase's own.
                try:
                    conn.compact_table(self.settings.hbase.meta_table, major=True)
                except Exception as exc:
                    log.warning("could not ask HBase to compact the meta table (%s); its own compaction will", exc)
        except Exception as exc:
            log.warning("could not delete %d old run records (%s); the next swap tries again", len(versions), exc)
        finally:
            conn.close()


def _may_run(run: Mapping) -> bool | None:
    """Whether the process of a run in state "writing" still runs: None when it cannot be asked (a
    run of another host, or recorded without its process)."""
    import socket

    import psutil

    from definitions.files import same_process

    if run.get("host") != socket.gethostname() or not run.get("pid"):
        return None  # another machine's run: trust the grace period
    if run.get("pid_start_ticks") is not None and run.get("boot_id"):
        # The process's start in clock ticks since boot: a wall clock stepped since (NTP, a resumed
        # VM) moves its create_time, and a live run was taken for dead, its tables dropped.
        same = same_process(run["pid"], run["pid_start_ticks"], run["boot_id"])
        if same is not None:
            return same
    try:  # a run recorded by an earlier release
        return abs(psutil.Process(run["pid"]).create_time() * 1000 - run.get("pid_started_ms", 0)) < 2_000
    except psutil.Error:
        return False
