"""A batch run's heartbeat: while it computes and writes, it records `heartbeat_ms` in its run
record every so often. Retention trusts a run of another host (whose process it cannot ask) for
`batch.retention_grace_s` after its last beat, not after its start: a run longer than that keeps
its tables while it beats (stores.pointer.retention_plan)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("lambda.batch")


def beat_every_s(grace_s: float) -> float:
    """Often enough that a run beating misses no grace period: four beats in one, at most a minute apart."""
    return max(1.0, min(60.0, grace_s / 4))


@contextmanager
def heartbeat(store: Any, version: int, every_s: float, state: str = "writing") -> Iterator[None]:
    """Beat while the run's record is still `state`: a run retention gave up (no beat within the
    grace) stops beating rather than bring back a record retention may have deleted; its next
    record (record_run_if) fails it."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            try:
                if not store.record_run_if(version, state, heartbeat_ms=int(time.time() * 1000)):
                    log.warning(
                        "run %d is no longer recorded %s (another process swapped it, or retention gave it up: "
                        "no beat within batch.retention_grace_s); it stops beating",
                        version,
                        state,
                    )
                    return
            except Exception as exc:  # HBase busy a moment: the next beat tries again
                log.warning("could not record the run's heartbeat: %s", exc)

    thread = threading.Thread(target=beat, name="run-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
