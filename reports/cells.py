"""The vocabulary of a report: a cell, its speed side and its batch side, and what counts as a
difference (`significant`) or as the sketch's own error (`tolerance`). Pure data, no I/O."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from definitions.views import HLL_LG_K

HLL_BOUND = 1.04 / math.sqrt(2**HLL_LG_K)  # relative standard error of a sketch: 1.625 % at lg_k = 12
SKETCH_TOLERANCE = 3.0  # a distinct cell's error within this many bounds is the sketch's own
LATE_AFTER_S = 3_600  # an event is late when its event time is more than this before its ingest time

CellId = tuple[str, str, str, int, int]  # view, granularity, key text, event bucket, ingest bucket


@dataclass
class RealtimeSnapshot:
    """Realtime cells read from Cassandra: {cell: value}, for ingest buckets in [start_ms, end_ms)."""

    start_ms: int
    end_ms: int | None
    read_ms: int
    cells: dict[CellId, float] = field(default_factory=dict)
    rows: int = 0
    unreadable: list = field(default_factory=list)  # stores.realtime_scan.Unreadable: ranges whose rows are missing
    damaged_rows: int = 0  # rows the speed layer cannot have written (refused as the serving layer refuses them)
    damaged: list[str] = field(default_factory=list)  # what is wrong with the first DAMAGED_NAMED of them
    # The TTLs the rows carry by when they were written (stores.realtime_ttl); (): the setting's.
    ttl_changes: tuple[tuple[int, int], ...] = ()
    # Since when (ms) the speed layer holds each view's rows (its marker; a switched replay's start
    # where earlier); a view not listed it does not maintain. None: every view from its first start.
    maintained_ms: dict[str, int] | None = None


DAMAGED_NAMED = 20


@dataclass
class BatchCell:
    batch: float = 0.0  # the batch layer's exact value (first copies only)
    expected: float = 0.0  # the exact value of what the speed layer counts: first copies + copies beyond the window
    first_records: int = 0
    recounts: int = 0  # copies beyond the de-duplication window in the cell
    dropped: int = 0  # copies within the window (both layers drop them)
    late_records: int = 0


@dataclass
class Cell:
    view: str
    granularity: str
    key: str
    event_bucket: int
    ingest_bucket: int
    speed: float
    speed_present: bool
    batch: BatchCell
    parts: dict[str, float] = field(default_factory=dict)  # cause -> signed share of speed − batch
    not_recounted: float = 0.0  # copies beyond the window the speed layer still de-duplicated

    @property
    def diff(self) -> float:
        return self.speed - self.batch.batch

    @property
    def batch_present(self) -> bool:
        return self.batch.first_records > 0

    @property
    def expected_present(self) -> bool:
        return self.batch.first_records + self.batch.recounts > 0


def tolerance(exact: float) -> float:
    """How far a sketch estimate of `exact` distinct values may be off and still be the sketch's error."""
    return max(0.5, SKETCH_TOLERANCE * HLL_BOUND * exact)


def significant(amount: float, additive: bool) -> bool:
    """Whether a difference counts: any for additive views; for distinct views one that does not
    round away (an estimate of 10.4 for 10 exact values agrees)."""
    return amount != 0 if additive else abs(amount) >= 0.5
