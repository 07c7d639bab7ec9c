"""The speed part of answers, kept until the realtime store is written again.

Between two micro-batches every query of the same view, key, buckets and cutoff reads the same
realtime rows. The realtime store marks every write once it has ended (stores.realtime_writes); the
serving layer reads those marks at most every `api.realtime_check_s` and keeps what a query read
from the realtime store labelled with the marks read before it. A write that ends later moves the
marks, and from the next check on every kept part is read again; so an answer shows a realtime
write at most `api.realtime_check_s` (plus one read of the marks) after it ended, and never mixes
rows of before and after it with an older label. What is kept is bounded in bytes
(`api.speed_cache_mib`; 0 turns it off) and in age (`MAX_AGE_S`, a guard against writes nobody
marked).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import TypeVar

from serving_layer.part_cache import PartCache
from stores.adapters import ReadTooLarge

T = TypeVar("T")
MAX_AGE_S = 60.0


class SpeedPartCache:
    def __init__(self, max_bytes: int, check_s: float) -> None:
        self.parts = PartCache(max_bytes, refusals=(ReadTooLarge,), setting="api.speed_cache_mib")
        self.check_s = check_s
        self._marks: Hashable | None = None
        self._epoch = 0  # one more at each change of the marks: what kept parts are labelled with
        self._read_at = 0.0  # monotonic, when the marks in _marks began to be read
        self._reading = False
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.parts.max_bytes > 0

    def epoch(self, read_marks: Callable[[], Hashable]) -> int:
        """The number of the realtime store's write marks as last read with `read_marks()`, read
        again once that is `check_s` old; while one thread reads them the others go on with the last
        ones. New marks get a new number and drop everything kept under the old ones."""
        now = time.monotonic()
        with self._lock:
            if self._marks is not None and (self._reading or now - self._read_at < self.check_s):
                return self._epoch
            self._reading = True
        try:
            marks = read_marks()
        finally:
            with self._lock:
                self._reading = False
        with self._lock:
            if marks != self._marks:
                self.parts.clear()
                self._epoch += 1
                self._marks = marks
            self._read_at = max(self._read_at, now)
            return self._epoch

    def get(self, key: Hashable, read_marks: Callable[[], Hashable], read: Callable[[], T]) -> T:
        """The speed part `read()` would give for `key`: kept from an earlier read under the same
        marks, or read now (after the marks) and kept."""
        epoch = self.epoch(read_marks)  # also when nothing is kept: what the marks tell (late drops) is heard
        if not self.enabled:
            return read()
        age_slot = int(time.monotonic() // MAX_AGE_S)
        return self.parts.get((epoch, age_slot, key), read)
