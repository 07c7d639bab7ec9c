"""The batch part of answers, kept in memory per batch table.

A batch table never changes once the pointer names it: a run writes and verifies its own new table
before the swap, and nothing writes it afterwards (a rollback names an older table, retention drops
tables). So what one query read from a table is what every later query would read: it is kept,
keyed by the table, the run that wrote it (a table name reused after the stores were wiped is
another run) and the exact read, in an LRU bounded by the number of cells held
(`api.batch_cache_cells`; 0 turns it off). Only the realtime part is read per query.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sized
from typing import TypeVar

from cachetools import LRUCache

T = TypeVar("T", bound=Sized)


class BatchPartCache:
    """Reads of immutable batch tables, kept up to `max_cells` cells (least recently used go first)."""

    def __init__(self, max_cells: int) -> None:
        self.max_cells = max_cells
        self._cache: LRUCache = LRUCache(maxsize=max(1, max_cells), getsizeof=lambda value: max(1, len(value)))
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable, read: Callable[[], T]) -> T:
        """The cached read for `key`, or `read()` kept for next time. A read that raises is not kept."""
        if self.max_cells <= 0:
            return read()
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self.hits += 1
                return found
            self.misses += 1
        value = read()  # outside the lock: a slow store does not hold up the cached answers
        if max(1, len(value)) <= self.max_cells:
            with self._lock:
                self._cache[key] = value
        return value

    @property
    def cells(self) -> int:
        with self._lock:
            return int(self._cache.currsize)
