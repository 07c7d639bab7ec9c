"""One `lambdactl up` or `down` at a time per state directory.

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
def stack_lock(state_dir: Path, say: Callable[[str], None] = lambda _: None) -> Iterator[None]:
    private_dir(state_dir)  # the settings in it are read by every process; the logs and Airflow's database
    with open(state_dir / "stack.lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()[:20] or "?"
            say(f"waiting for another lambdactl up or down on {state_dir} (pid {holder}) to finish")
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.truncate(0)
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
