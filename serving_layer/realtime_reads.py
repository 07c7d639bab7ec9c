"""The serving layer's reads of the realtime store: one reader made when first needed (and made
again after a failed read), each read tried twice, then StoreUnavailable naming the store; and the
speed part of answers kept until the store is written again (serving_layer.speed_cache)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, TypeVar

from definitions.settings import Settings
from serving_layer.speed_cache import SpeedPartCache
from serving_layer.unavailable import StoreUnavailable
from stores import registry

if TYPE_CHECKING:
    from stores.adapters import RealtimeReaderAdapter

log = logging.getLogger(__name__)
T = TypeVar("T")


class RealtimeReads:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.cache = SpeedPartCache(settings.api.speed_cache_mib * 2**20, settings.api.realtime_check_s)
        self._reader: RealtimeReaderAdapter | None = None
        self._lock = threading.Lock()

    def reader(self) -> RealtimeReaderAdapter:
        with self._lock:
            if self._reader is None:
                self._reader = registry.realtime_reader(self.settings, timeout_s=5)
            return self._reader

    def reset(self) -> None:
        with self._lock:
            if self._reader is not None:
                try:
                    self._reader.close()
                except Exception:  # a broken cluster object may fail to shut down; drop it anyway
                    pass
                self._reader = None

    def read(self, fn: Callable[[RealtimeReaderAdapter], T], attempts: int = 2) -> T:
        """`fn(reader)`; any failure makes a new reader and tries again, then is StoreUnavailable."""
        for attempt in range(1, attempts + 1):
            try:
                return fn(self.reader())
            except Exception as exc:
                self.reset()
                if attempt == attempts:
                    log.warning("cassandra read failed: %s: %s", type(exc).__name__, exc)
                    raise StoreUnavailable("cassandra", f"{type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable")

    def kept(self, key: Hashable, fn: Callable[[RealtimeReaderAdapter], T]) -> T:
        """`read(fn)`, kept for `key` until the realtime store is written again; read every time
        from a reader that keeps no write marks (an adapter without `generation`)."""
        reader = self.read(lambda r: r)  # StoreUnavailable when no reader can be made
        if not hasattr(reader, "generation"):
            return self.read(fn)
        return self.cache.get(key, lambda: self.read(_marks), lambda: self.read(fn))


def _marks(reader: object) -> Hashable:
    """The realtime store's write marks (stores.realtime_writes), from a reader that keeps them."""
    return reader.generation()  # type: ignore[attr-defined]
