"""The pointer generation below which no worker process of one API answers any more.

Each worker keeps the pointer it read for `api.pointer_cache_s`. Alone, a worker never goes back
to an older pointer (serving_layer.pointer_cache); across workers it could: one answers from
the moved pointer, the next query reaches another worker still keeping the older one. `lambdactl
views apply` switches a view by moving the pointer and promises that once one answer came from the
new definition, none comes from the old. So every worker writes the generation of each pointer it
reads to a file the workers share, before it answers from it, and reuses a kept pointer only while
it is at least that generation: a query that starts after an answer from a newer pointer reads the
pointer again (HBase reads of one row are linearizable, so that read is at least as new).
"""

from __future__ import annotations

import fcntl
import logging
from pathlib import Path

from definitions.files import replace_text

log = logging.getLogger("lambda.serving")


class PointerFloor:
    """The highest pointer generation any worker answered from, in `path` (-1: none yet)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = path.with_name(f".{path.name}.lock")

    def get(self) -> int:
        try:
            return int(self.path.read_text())
        except (OSError, ValueError):
            return -1

    def seen(self, before: int, generation: int) -> None:
        """A pointer of `generation` was read, after the floor read `before`: raise the floor to it,
        or bring it down to it when the read is older than what the floor was before it began (the
        store was made again, its generations start anew) and no worker moved the floor since."""
        if generation == before:
            return
        try:
            with open(self._lock, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                now = self.get()
                if generation > now or now == before:
                    replace_text(self.path, str(generation))
        except OSError as exc:  # the API's run directory went away: each worker is monotonic on its own
            log.warning("the pointer floor %s cannot be written: %s", self.path, exc)
