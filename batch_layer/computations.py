"""The batch job's view computations, each done once: views that compute the same thing share one
result, and an additive view's coarser granularities are rolled up from its finer result.

From the de-duplicated events, every (view, granularity) of a run is wanted. Two shortcuts keep the
answers exactly those of `View.compute` on the events (tests/unit/batch/test_computations.py):

- Views whose computation is the same (keys, aggregation, column, filter, defaults; only their name,
  layout or granularities differ — `top_pages` is `page_views` laid out by bucket) get one frame per
  granularity.
- A count or a sum at an hour is the sum of its minutes, a day the sum of its hours: an additive
  view computes its finest granularity from the events and each coarser one from the one before it
  (the buckets nest: 60 s | 3,600 s | 86,400 s), so only the finest reads the events. A distinct
  count does not add up; each of its granularities reads the events.

Every yielded frame is cached; it stays cached until the next coarser one of its computation is
yielded and used, then it is released.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from definitions.views import GRANULARITIES, View


def computation_of(view: View) -> tuple[Any, ...]:
    """What a view's rows depend on: views equal in this compute equal frames at a granularity."""
    return (view.keys, view.aggregation, view.column, view.where, view.defaults)


def rolled_up(finer, view: View, granularity: str):
    """An additive view at `granularity`, from its frame at a finer granularity that nests in it."""
    from pyspark.sql import functions as F

    if not view.additive:
        raise ValueError(f"view {view.name}: a {view.aggregation} does not add up across buckets")
    size = GRANULARITIES[granularity]
    bucket = (F.floor(F.col("event_bucket") / size) * size).cast("bigint").alias("event_bucket")
    return finer.groupBy(*[F.col(k) for k in view.keys], bucket).agg(F.sum("value").cast("bigint").alias("value"))


def computations(events, views: Iterable[View]) -> Iterator[tuple[View, str, Any]]:
    """(view, granularity, frame) for every granularity of every view, grouped by computation, finest
    granularity first. Use each frame (run its jobs) before asking for the next."""
    groups: dict[tuple[Any, ...], list[View]] = {}
    for view in views:
        groups.setdefault(computation_of(view), []).append(view)
    for members in groups.values():
        first = members[0]
        wanted = sorted({g for v in members for g in v.granularities}, key=GRANULARITIES.__getitem__)
        finer = None
        try:
            for granularity in wanted:
                if finer is not None and first.additive and GRANULARITIES[granularity] % finer[0] == 0:
                    frame = rolled_up(finer[1], first, granularity).cache()
                else:
                    frame = first.compute(events, granularity).cache()
                for view in members:
                    if granularity in view.granularities:
                        yield view, granularity, frame
                if finer is not None:
                    finer[1].unpersist()
                finer = (GRANULARITIES[granularity], frame)
        finally:
            if finer is not None:
                finer[1].unpersist()
