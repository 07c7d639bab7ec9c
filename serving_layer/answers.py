"""What the serving layer answers: a series or a top-N list with its provenance (which batch
version and cutoff, whether it is complete and why not), and the buckets a query covers."""

from __future__ import annotations

from dataclasses import dataclass, field

from definitions.views import GRANULARITIES, View
from serving_layer.merge import MergedSeries


class ViewBuilding(RuntimeError):
    """The view is being added or rebuilt: its answers would miss events (stores.view_lifecycle)."""


@dataclass
class Provenance:
    version: int | None
    cutoff_ms: int
    complete: bool = True
    unavailable: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # why not complete, one sentence each

    def incomplete(self, reason: str) -> None:
        self.complete = False
        self.reasons.append(reason)


@dataclass
class SeriesAnswer:
    view: View
    keys: dict[str, str]
    granularity: str
    series: MergedSeries
    provenance: Provenance


@dataclass
class TopAnswer:
    view: View
    granularity: str
    start: int
    end: int
    rows: list[tuple[str, int, int, int]]
    provenance: Provenance


def buckets_between(start_s: int, end_s: int, granularity: str) -> list[int]:
    """Bucket starts covering [start, end): from the bucket holding `start` up to before `end`."""
    size = GRANULARITIES[granularity]
    first = start_s - start_s % size
    return list(range(first, end_s, size))
