"""Several API worker processes (api.workers > 1) serve one set of declared views: a reload made by
one of them reaches the others before it is answered.

Each running API has a directory (made empty by the process that starts the workers):
`generation` counts the reloads and refreshes made so far, with the count of the last reload beside it,
and each worker writes `worker-<pid>-<id>` with the count it serves (and why it could not follow, if it
could not). The worker that answers POST /api/v1/admin/views/reload (read the declared views again) or
/views/refresh (read the stores again, the served views kept) does so itself, counts one more, and
answers once every live worker serves that count; each worker looks at the count every WATCH_S and,
behind it, reloads if a reload was counted since the count it serves, else refreshes. A worker that
fails to follow says why in its file, serves what it served, and tries again after a pause (doubled
while it keeps failing, up to RETRY_MAX_S) until it follows or the count moves. A worker that
starts (or is started again after a crash) reads the declared views after it read the count, so it
serves at least the count it saw.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import anyio
from starlette.concurrency import run_in_threadpool

from api.errors import failure_text
from definitions.files import replace_text

log = logging.getLogger("lambda.api")
WATCH_S = 0.2
# A worker that failed to follow tries again after this pause, doubled while it keeps failing.
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 30.0
GENERATION = "generation"
WORKER_PREFIX = "worker-"


def prepare(directory: Path) -> None:
    """An empty directory for the workers about to start (what an earlier run left is removed)."""
    directory.mkdir(parents=True, exist_ok=True)
    for entry in directory.iterdir():
        if entry.is_file():
            entry.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WorkerSync:
    """This worker's side of the directory. `served` is the count whose views it serves."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.pid = os.getpid()
        self.file = directory / f"{WORKER_PREFIX}{self.pid}-{uuid.uuid4().hex[:8]}"
        # Read before the views are, and written at once: a reload counted after this waits for this
        # worker, which follows it.
        self.served = self.generation()
        self.views_served = self.served  # the count up to which every reload's views are served
        self.last_report: tuple[int, str | None] = (self.served, None)
        self.report(self.served)

    def generation(self) -> int:
        return self.counts()[0]

    def counts(self) -> tuple[int, int]:
        """(the count of reloads and refreshes, the count at the last reload), read in one file."""
        try:
            fields = [max(0, int(f)) for f in (self.directory / GENERATION).read_text().split()]
        except (FileNotFoundError, ValueError):
            return 0, 0
        if not fields:
            return 0, 0
        return fields[0], min(fields[0], fields[1]) if len(fields) > 1 else fields[0]

    def report(self, generation: int, error: str | None = None) -> None:
        """This worker serves `generation`, or (`error`) failed to follow it and still serves the count
        it served."""
        self.last_report = (generation, error)  # written again after the directory failed a moment
        if error is None:
            self.served = max(self.served, generation)
        # The count served (a reload this worker made itself meanwhile may be ahead of `generation`),
        # and the count an error is about: a waiter for a later count is not failed by it.
        state = {"generation": self.served, "error": error, "failed": generation if error else None}
        replace_text(self.file, json.dumps(state))

    def reload_due(self) -> int | None:
        """The count to reload up to when a reload was counted that this worker does not serve yet
        (a refresh must then reload: counting it would hide the reload), else None."""
        count, reloaded = self.counts()
        return count if reloaded > self.views_served else None

    def reloaded(self, generation: int) -> None:
        """This worker read the declared views after the count was `generation`."""
        self.views_served = max(self.views_served, generation)

    def bump(self, views: bool = True) -> int:
        """One more reload (`views`) or refresh, made by this worker already: the new count."""
        generation, reloaded = self.count(views)
        return self.made(generation, reloaded, views)

    def count(self, views: bool = True) -> tuple[int, int]:
        """Count one more reload (`views`) or refresh, before this worker makes it (a reload reads
        the views after this, so no worker claims a count with views read before a newer reload's):
        (the new count, the count at the last reload before it). Then made() once it is made."""
        with open(self.directory / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            count, reloaded = self.counts()
            generation = count + 1
            replace_text(self.directory / GENERATION, f"{generation} {generation if views else reloaded}")
        return generation, reloaded

    def made(self, generation: int, reloaded: int, views: bool = True) -> int:
        """This worker made the reload or refresh counted as `generation` (count()): reported."""
        if views:
            self.reloaded(generation)
        elif reloaded > self.views_served:
            # A reload was counted that this worker has not read the views of: its loop makes it and
            # then reports this count; reporting it now would tell the reload's waiter it is served.
            return generation
        self.report(generation)
        return generation

    def close(self) -> None:
        """This worker stops serving: no reload waits for it."""
        self.file.unlink(missing_ok=True)

    def pending(self, generation: int) -> dict[str, str]:
        """The live workers that do not serve `generation`'s views: `pid-id` → why (still reading
        them, or the error that stopped them). Files of workers whose process ended are removed."""
        behind: dict[str, str] = {}
        for path in self.directory.glob(f"{WORKER_PREFIX}*"):
            try:
                worker = path.name.removeprefix(WORKER_PREFIX)
                pid = int(worker.split("-")[0])
                state = json.loads(path.read_text())
            except (ValueError, OSError):
                continue  # being replaced, or not a worker's file
            if not _alive(pid):
                path.unlink(missing_ok=True)
                continue
            if int(state.get("generation", 0)) >= generation:
                continue
            if state.get("error") and int(state.get("failed") or generation) >= generation:
                behind[worker] = f"it could not read them ({state['error']})"
            else:
                behind[worker] = "it has not read them yet"
        return behind

    async def wait_for(self, generation: int, timeout_s: float) -> dict[str, str]:
        """Wait until every live worker serves `generation` (or one failed to): what is still pending."""
        deadline = time.monotonic() + timeout_s
        while True:
            behind = self.pending(generation)
            if not behind or any(why.startswith("it could not") for why in behind.values()):
                return behind
            if time.monotonic() > deadline:
                return behind
            await anyio.sleep(WATCH_S / 4)

    async def follow(self, reload: Callable[[], object], refresh: Callable[[], object]) -> None:
        """Run for the worker's life: read the declared views again whenever another worker did, or
        only the stores when only refreshes were counted since the count this one serves."""
        failed_at: int | None = None  # the count this worker last failed to follow
        pause = retry_at = 0.0
        stalled = 0.0  # the pause after the state directory itself failed, doubled while it fails
        while True:
            await anyio.sleep(WATCH_S)
            try:
                if stalled:  # the last write of this worker's file may have failed: written again
                    self.report(*self.last_report)
                    stalled = 0.0
                generation, reloaded = self.counts()
                if generation <= self.served:
                    continue
                if generation == failed_at and time.monotonic() < retry_at:
                    continue
                views = reloaded > self.views_served  # a reload not followed yet (or that failed here)
                try:
                    await run_in_threadpool(reload if views else refresh)
                except Exception as exc:  # noqa: BLE001 - reported to the worker that asked, served views kept
                    pause = min(RETRY_MAX_S, pause * 2) if generation == failed_at else RETRY_FIRST_S
                    failed_at, retry_at = generation, time.monotonic() + pause
                    log.warning(
                        "worker %d: cannot follow the %s (tried again in %.0fs): %s: %s",
                        self.pid,
                        "views reload" if views else "refresh",
                        pause,
                        type(exc).__name__,
                        exc,
                    )
                    stalled = 0.0
                    self.report(generation, failure_text(exc))
                    continue
                failed_at = None
                if views:
                    self.reloaded(generation)
                stalled = 0.0
                self.report(generation)
            except Exception as exc:  # noqa: BLE001 - the directory failed (full disk, EIO): never end the loop
                stalled = min(RETRY_MAX_S, stalled * 2 or RETRY_FIRST_S)
                log.warning(
                    "worker %d: cannot read or write the workers' state in %s (tried again in %.0fs): %s: %s",
                    self.pid,
                    self.directory,
                    stalled,
                    type(exc).__name__,
                    exc,
                )
                await anyio.sleep(stalled)
