"""One `lambdactl up` or `down` at a time per state directory (and one `views apply`).

Two at once each launched the stores (both saw none running, and both passed the port checks as
nothing was bound yet); the second pid file hid the first process. A second one now waits for the
first, saying so, and then finds what the first did."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from definitions.files import private_dir


@contextmanager
def state_lock(state_dir: Path, name: str, doing: str, say: Callable[[str], None] = lambda _: None) -> Iterator[bool]:
    """Hold `state_dir`/`name` (an flock: the kernel releases it when its holder dies, so no lock
    outlives a killed command). A second holder waits, saying so; yields whether it waited (what
    the first did may have changed what the second read before it)."""
    private_dir(state_dir)  # the settings in it are read by every process; the logs and Airflow's database
    with open(state_dir / name, "a+") as handle:
        waited = False
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()[:20] or "?"
            say(f"waiting for another {doing} on {state_dir} (pid {holder}) to finish")
            fcntl.flock(handle, fcntl.LOCK_EX)
            waited = True
        handle.truncate(0)
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield waited
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def stack_lock(state_dir: Path, say: Callable[[str], None] = lambda _: None) -> Iterator[None]:
    with state_lock(state_dir, "stack.lock", "lambdactl up or down", say):
        yield
