"""The pointer as one API worker keeps it between queries.

It is read again once it is `api.pointer_cache_s` old. A query served from a pointer that moved less
than that ago is still exact: the old table stays (retention keeps `batch.keep_versions`), and the
realtime rows it needs stay until the clean-up, which waits `batch.cleanup_settle_s` after a swap
(lambdactl clean-realtime). A kept pointer is never older than one this worker answered from, nor,
with a floor (serving_layer.pointer_floor), than one any worker of the API answered from.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from definitions.settings import Settings
from serving_layer.pointer_floor import PointerFloor
from stores.batch_views import Pointer


def generation(pointer: Pointer | None) -> int:
    return pointer.generation if pointer is not None else -1


class PointerCache:
    """The pointer `read` returned last, kept `settings.api.pointer_cache_s` (0: read at every query)."""

    def __init__(
        self, settings: Settings, read: Callable[[], Pointer | None], floor: PointerFloor | None = None
    ) -> None:
        self.settings = settings
        self.read = read
        self.floor = floor  # shared by the API's worker processes
        self.cached: tuple[Pointer | None, float] | None = None  # (pointer, when read: monotonic)

    def forget(self) -> None:
        self.cached = None

    def get(self, fresh: bool = False) -> tuple[Pointer | None, float]:
        """(the pointer, when it was read from the store, monotonic); read now when `fresh`."""
        ttl = self.settings.api.pointer_cache_s
        now = time.monotonic()
        cached = self.cached
        floor = self.floor.get() if self.floor is not None and ttl > 0 else -1
        if not fresh and cached is not None and now - cached[1] < ttl and generation(cached[0]) >= floor:
            return cached
        read = (self.read(), now)
        if self.floor is not None and ttl > 0:
            self.floor.seen(floor, generation(read[0]))  # before it is answered from
        # A read that began before a newer one was cached keeps out: an answer never goes back to an
        # older pointer (a read of a re-made store, from a later start than the cache's life, does).
        current = self.cached
        if ttl > 0 and (current is None or generation(read[0]) >= generation(current[0]) or now >= current[1] + ttl):
            self.cached = read
        return read
