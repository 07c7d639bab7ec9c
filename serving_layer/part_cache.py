"""Parts of answers kept in memory: an LRU bounded by the bytes it holds — keys (which carry what
the caller asked for) and values (sketches included) — where queries that miss the same key at once
share one read.

Two users: the batch part (serving_layer.service), keyed by the batch table, the run that wrote it
and the exact read. A batch table never changes once the pointer names it: a run writes and
verifies its own new table before the swap, and nothing writes it afterwards (a rollback names an
older table, retention drops tables); a table name reused after the stores were wiped is another
run. So what one query read is what every later query would read (`api.batch_cache_mib`; 0 turns
it off). And the speed part (serving_layer.speed_cache), kept until the realtime store is written
again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from dataclasses import fields, is_dataclass
from typing import Any, TypeVar

from cachetools import LRUCache

from definitions.logs import REPEATS
from stores.adapters import text_bytes

T = TypeVar("T")
_OBJECT = 56  # bytes of a small Python object, with its slot in a container


log = logging.getLogger(__name__)


def approx_bytes(value: Any) -> int:
    """What `value` holds in memory, roughly (containers, strings, bytes, numbers, dataclasses)."""
    if isinstance(value, str):
        return _OBJECT + text_bytes(value)  # 1, 2 or 4 bytes a character
    if isinstance(value, (bytes, bytearray)):
        return _OBJECT + len(value)
    if isinstance(value, dict):
        return _OBJECT * 2 + sum(approx_bytes(k) + approx_bytes(v) for k, v in value.items())
    if isinstance(value, (tuple, list, set, frozenset)):
        return _OBJECT + sum(approx_bytes(x) for x in value)
    if isinstance(value, _Refused):
        return _OBJECT + approx_bytes(str(value.error))
    if is_dataclass(value) and not isinstance(value, type):
        return _OBJECT + sum(approx_bytes(getattr(value, f.name)) for f in fields(value))
    return _OBJECT


class _Flight:
    """A read under way, that other queries of the same key wait for."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.ok = False
        self.value: Any = None
        self.refused: Exception | None = None  # the read's refusal (PartCache.refusals), shared too


class _Refused:
    """A kept refusal: the same read would be refused again."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def again(self) -> Exception:
        """A fresh exception like the kept one (one instance raised in many threads would share a
        traceback)."""
        return type(self.error)(*self.error.args)


class PartCache:
    """Reads that stay true while their key does, kept up to `max_bytes` (least recently used go first)."""

    def __init__(self, max_bytes: int, refusals: tuple[type[Exception], ...] = (), setting: str = "") -> None:
        """`refusals`: exceptions a read raises whatever the store's state (a read too large for
        `api.max_read_mib`): kept like a value, and raised to the queries that waited for it, so a
        refused query asked again costs no second read of the store. `setting`: the one that sizes
        this cache, named when a read is too large to keep."""
        self.max_bytes = max_bytes
        self.setting = setting
        self.too_large = 0  # reads larger than the whole cache: read again at every query of them
        self.refusals = refusals
        self._cache: LRUCache = LRUCache(maxsize=max(1, max_bytes), getsizeof=lambda entry: entry[0])
        self._lock = threading.Lock()
        self._flights: dict[Hashable, _Flight] = {}
        self.hits = 0
        self.misses = 0
        self.shared = 0  # misses answered by a read another query had under way

    def get(self, key: Hashable, read: Callable[[], T]) -> T:
        """The cached read for `key`, or `read()` kept for next time. A read that raises is not kept.
        Queries that miss the same key while it is being read wait for that read instead of reading
        too (a popular query would otherwise reach the store once per concurrent request)."""
        if self.max_bytes <= 0:
            return read()
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self.hits += 1
                if isinstance(found[1], _Refused):
                    raise found[1].again()
                return found[1]
            flight = self._flights.get(key)
            leader = flight is None
            if flight is None:
                flight = self._flights[key] = _Flight()
                self.misses += 1
            else:
                self.shared += 1
        if not leader:
            flight.done.wait()
            if flight.refused is not None:
                raise _Refused(flight.refused).again()
            return flight.value if flight.ok else read()  # the read failed: fail (or succeed) on our own
        try:
            try:
                value = read()  # outside the lock: a slow store does not hold up the cached answers
            except self.refusals as exc:
                flight.refused = exc
                self.put(key, _Refused(exc))
                raise
            flight.value, flight.ok = value, True
            self.put(key, value)
            return value
        finally:
            with self._lock:
                self._flights.pop(key, None)
            flight.done.set()

    def put(self, key: Hashable, value: Any) -> None:
        size = approx_bytes(key) + approx_bytes(value)
        if 0 < size <= self.max_bytes:
            with self._lock:
                self._cache[key] = (size, value)
        elif self.max_bytes > 0:  # said, not kept silently: each query of it reads the store again
            self.too_large += 1
            log.warning(
                "a read of %d MiB is larger than the whole cache (%s, %d MiB): it is read again at every query "
                "of it; raise the setting (within the workers' memory) or ask narrower windows",
                size >> 20,
                self.setting or "its size",
                self.max_bytes >> 20,
                extra=REPEATS,
            )

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()

    @property
    def bytes(self) -> int:
        with self._lock:
            return int(self._cache.currsize)
