"""One compaction of the master dataset at a time, whichever host or state directory runs it: a
lease on HDFS, `<master_path>/_compacted/_leases/`.

A compaction writes a file of its own there, then lists the folder. It goes on only when no other
lease there is live; otherwise it deletes its own and is refused. Two that start together may both
be refused (run again); both never go on, as the one that wrote second lists after the first one's
file is there. Whether a lease is live is told by the namenode's clock alone (no host's): a lease
file last written more than LEASE_S before one's own was left by a compaction that died, and so
was one of this host whose process no longer runs. The holder appends to its file every RENEW_S,
and checks before each step that changes the master (moving hours in, the marker, deleting
originals) that its file is still there and renewed: one paused for longer than a lease (its file
deleted by a compaction that took it for dead) stops there.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

from definitions.files import boot_id, start_ticks
from definitions.settings import Settings
from stores.master_compacted import compacted_path

log = logging.getLogger("lambda.compaction")

LEASE_S = 600.0  # a lease not renewed for this long was left by a compaction that died
RENEW_S = 30.0
MAX_LEASE_BYTES = 64 * 1024  # a lease file read: its record, and one byte a renewal


class LeaseHeld(RuntimeError):
    """Another compaction holds the master's lease (the message names it); nothing was changed."""


class LeaseLost(RuntimeError):
    """This compaction's lease went (not renewed in time, or taken for dead): it stops before
    changing the master further."""


class LeaseFile(NamedTuple):
    name: str
    modified_ms: int  # by the namenode's clock


def leases_path(settings: Settings) -> str:
    return f"{compacted_path(settings)}/_leases"


def rivals(files: Iterable[LeaseFile], mine: str, lease_ms: int) -> tuple[list[LeaseFile], list[LeaseFile]]:
    """(the live leases of others, the expired ones) among `files`, the lease folder's listing made
    after `mine` was written: expired is last written more than `lease_ms` before `mine` was."""
    found = list(files)
    own = next((f for f in found if f.name == mine), None)
    if own is None:
        raise LeaseHeld(f"this compaction's lease {mine} was gone before it was listed (taken for dead): run again")
    others = [f for f in found if f.name != mine]
    return (
        [f for f in others if f.modified_ms >= own.modified_ms - lease_ms],
        [f for f in others if f.modified_ms < own.modified_ms - lease_ms],
    )


def _record() -> dict:
    """Who holds a lease: what stores.batch_views._may_run asks about (the start ticks, or where
    there is no /proc the process's start time)."""
    import psutil

    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "pid_start_ticks": start_ticks(pid),
        "boot_id": boot_id(),
        "pid_started_ms": int(psutil.Process(pid).create_time() * 1000),
        "started_ms": int(time.time() * 1000),
    }


def _holder(data: bytes | None) -> dict:
    """A lease file's record ({} when it cannot be read: taken as live)."""
    if not data:
        return {}
    try:
        record = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _dead(record: dict) -> bool:
    """A lease of this host whose process no longer runs (stores.batch_views._may_run)."""
    from stores.batch_views import _may_run

    return bool(record) and _may_run(record) is False


def _describe(record: dict, modified_ms: int) -> str:
    from definitions.times import iso_ms

    who = f"host {record.get('host', '?')}, pid {record.get('pid', '?')}" if record else "unreadable record"
    return f"{who}, renewed {iso_ms(modified_ms)}"


class Lease:
    """The lease a compaction holds (compaction_lease): renewed in the background; `check()` before
    each step that changes the master."""

    def __init__(self, settings: Settings, name: str) -> None:
        self.settings = settings
        self.path = f"{leases_path(settings)}/{name}"
        self.renewed = time.monotonic()
        self.lost = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_every, name="master-lease", daemon=True)

    def _renew_every(self) -> None:
        from stores.webhdfs import WebHdfs

        while not self._stop.wait(RENEW_S):
            try:
                with WebHdfs(self.settings) as fs:
                    fs.append(self.path, b".")  # fails once the file is gone: never written back
                self.renewed = time.monotonic()
            except Exception as exc:  # noqa: BLE001 - HDFS away a while: check() tells when it is too long
                self.lost = f"{type(exc).__name__}: {str(exc)[:200]}"
                log.warning("could not renew the master compaction lease %s: %s", self.path, self.lost)

    def check(self) -> None:
        """LeaseLost when this lease may have been taken for dead: not renewed for most of a lease,
        or its file gone."""
        from stores.webhdfs import WebHdfs

        if time.monotonic() - self.renewed > LEASE_S - 2 * RENEW_S:
            raise LeaseLost(
                f"the master compaction lease {self.path} was not renewed for {time.monotonic() - self.renewed:.0f}s "
                f"({self.lost or 'this process was paused'}): another compaction may have taken it; stopped here"
            )
        with WebHdfs(self.settings) as fs:
            if fs.read(self.path, max_bytes=MAX_LEASE_BYTES) is None:
                raise LeaseLost(
                    f"the master compaction lease {self.path} is gone (taken for dead by another compaction): "
                    "stopped here"
                )


@contextmanager
def compaction_lease(settings: Settings) -> Iterator[Lease]:
    """Hold the master's compaction lease (LeaseHeld when another compaction holds it)."""
    from stores.webhdfs import WebHdfs

    folder = leases_path(settings)
    name = f"{uuid.uuid4().hex}.json"
    lease = Lease(settings, name)
    with WebHdfs(settings) as fs:
        fs.mkdirs(folder)
        fs.write(lease.path, json.dumps(_record()).encode() + b"\n", overwrite=False)
        try:
            live, expired = rivals((LeaseFile(n, t) for n, t, _ in fs.versions(folder)), name, int(LEASE_S * 1000))
            held = []
            for other in live:
                record = _holder(fs.read(f"{folder}/{other.name}", max_bytes=MAX_LEASE_BYTES))
                if _dead(record):
                    expired.append(other)
                else:
                    held.append(_describe(record, other.modified_ms))
            if held:
                raise LeaseHeld(
                    f"another compaction of the master dataset holds its lease ({'; '.join(held)}; {folder}): "
                    "nothing changed; run again once it is done"
                )
            for other in expired:  # left by a compaction that died
                log.info("a dead compaction's lease removed: %s/%s", folder, other.name)
                fs.delete(f"{folder}/{other.name}")
        except BaseException:
            _delete_quietly(fs, lease.path)
            raise
    lease._thread.start()
    try:
        yield lease
    finally:
        lease._stop.set()
        lease._thread.join()
        with WebHdfs(settings) as fs:
            _delete_quietly(fs, lease.path)


def _delete_quietly(fs, path: str) -> None:
    """Delete a lease file; a failure is logged, not raised over the compaction's outcome (the file
    expires, or is taken over on this host once the process ends)."""
    try:
        fs.delete(path)
    except Exception as exc:  # noqa: BLE001 - the outcome in flight is what the operator needs
        log.warning("could not delete the master compaction lease %s: %s", path, exc)
