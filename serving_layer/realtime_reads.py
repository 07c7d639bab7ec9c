"""The serving layer's reads of the realtime store: one reader made when first needed (and made
again after a failed read), each read tried twice, then StoreUnavailable naming the store; and the
speed part of answers kept until the store is written again (serving_layer.speed_cache).

A failed read replaces only the reader it failed on, and that reader is closed `CLOSE_AFTER_S`
later: reads still running on it (other requests) finish, instead of failing on a closed cluster
and replacing the reader their neighbours had just made."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, TypeVar

from definitions.settings import Settings
from serving_layer.speed_cache import SpeedPartCache
from serving_layer.unavailable import StoreUnavailable
from stores import registry
from stores.realtime_ttl import TtlChange

if TYPE_CHECKING:
    from stores.adapters import RealtimeReaderAdapter

log = logging.getLogger(__name__)
T = TypeVar("T")

TTL_RECHECK_S = 60.0  # how often the realtime tables' TTL record is read again

# How long a replaced reader stays open for the reads still running on it: longer than a read's
# own timeouts (the reader is made with 5 s ones).
CLOSE_AFTER_S = 30.0
# After a reader could not be made twice in a row, reads fail at once for this long instead of each
# waiting for a connect of its own (one after another, under the lock): an unreachable store then
# costs one connect timeout per pause, not one per query. One failure alone (a blink) is tried again.
REBUILD_AFTER_S = 2.0


class RealtimeReads:
    def __init__(self, settings: Settings, on_marks: Callable[[Any], None] | None = None) -> None:
        self.settings = settings
        self.on_marks = on_marks  # given every read of the write marks before rows are read under them
        self.cache = SpeedPartCache(settings.api.speed_cache_mib * 2**20, settings.api.realtime_check_s)
        self._reader: RealtimeReaderAdapter | None = None
        self._lock = threading.Lock()
        self._ttl_changes: tuple[TtlChange, ...] = ()
        self._ttl_read_at: float | None = None  # monotonic
        self._ttl_lock = threading.Lock()
        # (monotonic, why, failures in a row) of the last reader that could not be made
        self._build_failed: tuple[float, str, int] | None = None

    def reader(self) -> RealtimeReaderAdapter:
        with self._lock:
            if self._reader is None:
                failed = self._build_failed
                if failed is not None and failed[2] >= 2 and time.monotonic() < failed[0] + REBUILD_AFTER_S:
                    raise ConnectionError(f"no realtime reader could be made, twice in a row: {failed[1]}")
                try:
                    self._reader = registry.realtime_reader(self.settings, timeout_s=5)
                except Exception as exc:  # failures in a row: one long after the last starts again
                    recent = failed is not None and time.monotonic() < failed[0] + 30 * REBUILD_AFTER_S
                    count = failed[2] + 1 if failed is not None and recent else 1
                    self._build_failed = (time.monotonic(), f"{type(exc).__name__}: {exc}"[:300], count)
                    raise
                self._build_failed = None
            return self._reader

    def close(self) -> None:
        """Close the reader now (the service is closing: no read runs any more)."""
        with self._lock:
            reader, self._reader = self._reader, None
        if reader is not None:
            _close(reader)

    def replace(self, failed: RealtimeReaderAdapter) -> None:
        """The next read makes a new reader, unless another read replaced `failed` already; `failed`
        is closed once the reads running on it had their time."""
        with self._lock:
            if self._reader is not failed:
                return
            self._reader = None
        closing = threading.Timer(CLOSE_AFTER_S, _close, args=(failed,))
        closing.daemon = True
        closing.start()

    def read(self, fn: Callable[[RealtimeReaderAdapter], T], attempts: int = 2) -> T:
        """`fn(reader)`; a failure makes a new reader (unless the store answered, refusing the query)
        and tries again, then is StoreUnavailable.
        A row that is wrong is StoreUnavailable at once: a new reader would read it again (and one
        bad row under steady queries kept many readers open, each closing only after a while)."""
        from stores.adapters import ReadTooLarge
        from stores.realtime import BadRealtimeRow, refused_by_server

        for attempt in range(1, attempts + 1):
            reader = None
            try:
                reader = self.reader()
                return fn(reader)
            except ReadTooLarge:
                raise  # the query asks too much: the same read again would too; the reader is fine
            except BadRealtimeRow as exc:
                log.warning("a realtime row cannot be read: %s", exc)
                raise StoreUnavailable("cassandra", f"{type(exc).__name__}: {exc}") from exc
            except Exception as exc:
                if reader is not None and not refused_by_server(exc):  # the store answered: the reader is fine
                    self.replace(reader)
                if attempt == attempts:
                    log.warning("cassandra read failed: %s: %s", type(exc).__name__, exc)
                    raise StoreUnavailable("cassandra", f"{type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable")

    def ttl_changes(self) -> tuple[TtlChange, ...]:
        """The TTLs realtime rows carry by when they were written (stores.realtime_ttl), read again
        once TTL_RECHECK_S old; () until read, or from a reader that has no `ttl_changes`. A failed
        read keeps the last one; a read under way is not waited for."""
        now = time.monotonic()
        if self._ttl_read_at is not None and now < self._ttl_read_at + TTL_RECHECK_S:
            return self._ttl_changes
        if not self._ttl_lock.acquire(blocking=False):
            return self._ttl_changes
        try:
            self._ttl_read_at = now
            reader = self.reader()
            if hasattr(reader, "ttl_changes"):
                self._ttl_changes = reader.ttl_changes()
        except Exception as exc:  # noqa: BLE001 - the last record stays; the query itself reads the store
            log.warning("could not read the realtime tables' TTL record: %s: %s", type(exc).__name__, exc)
        finally:
            self._ttl_lock.release()
        return self._ttl_changes

    def kept(self, key: Hashable, fn: Callable[[RealtimeReaderAdapter], T]) -> T:
        """`read(fn)`, kept for `key` until the realtime store is written again; read every time
        from a reader that keeps no write marks (an adapter without `generation`)."""
        reader = self.read(lambda r: r)  # StoreUnavailable when no reader can be made
        if not hasattr(reader, "generation"):
            return self.read(fn)
        return self.cache.get(key, self._read_marks, lambda: self.read(fn))

    def _read_marks(self) -> Hashable:
        marks = self.read(_marks)
        if self.on_marks is not None:
            self.on_marks(marks)
        return marks


def _close(reader: RealtimeReaderAdapter) -> None:
    try:
        reader.close()
    except Exception:  # a broken cluster object may fail to shut down; it is dropped anyway
        log.debug("closing a replaced realtime reader failed", exc_info=True)


def _marks(reader: object) -> Hashable:
    """The realtime store's write marks (stores.realtime_writes), from a reader that keeps them."""
    return reader.generation()  # type: ignore[attr-defined]
