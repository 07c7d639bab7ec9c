"""Every granularity of a view, computed together at less cost than one at a time.

`View.compute` aggregates the events afresh for each granularity. A batch run needs them all, and
the coarser ones follow from the finest (the bucket sizes divide each other, GRANULARITIES):
- an additive view's hour and day cells are the sums of its minute cells;
- a distinct view needs, for each key and visitor, the set of buckets they were seen in. One
  shuffle gathers each (keys, value) pair's finest buckets; each granularity then counts its
  distinct (cell, value) pairs from those sets without going back to the events.

The cells are exactly `View.compute`'s, column for column (tests/unit/batch/test_view_rollup.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from definitions.events import FIELDS
from definitions.views import _DISTINCT_VALUE, GRANULARITIES, HLL_LG_K, View, _keys_present, bucket_start, event_bucket

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_FIELD_KINDS = {f.name: f.kind for f in FIELDS}
_BUCKETS = "__buckets"  # the finest buckets of one (keys, value) pair, while a distinct view is computed


def compute_each(view: View, events: DataFrame) -> Iterator[tuple[str, DataFrame]]:
    """(granularity, cells) for each of the view's granularities, finest first, each as
    `view.compute(events, granularity)` gives it.

    What the coarser granularities are derived from is cached while the generator runs and released
    when it ends; an additive view's finest cells are that cache, so a consumer should leave a frame
    it did not cache itself cached (unpersisting it costs a recomputation, not a wrong cell).
    """
    ordered = sorted(view.granularities, key=GRANULARITIES.__getitem__)
    if len(ordered) == 1:
        yield ordered[0], view.compute(events, ordered[0])
        return
    if view.aggregation == "distinct":
        yield from _distinct(view, events, ordered)
    elif view.aggregation == "count" or _FIELD_KINDS[view.measured_column] == "int":
        yield from _additive(view, events, ordered)
    else:  # a sum Spark takes in floating point: whole-number minute sums would round each minute
        for granularity in ordered:
            yield granularity, view.compute(events, granularity)


def _additive(view: View, events: DataFrame, ordered: list[str]) -> Iterator[tuple[str, DataFrame]]:
    from pyspark.sql import functions as F

    finest = view.compute(events, ordered[0]).cache()
    try:
        yield ordered[0], finest
        for granularity in ordered[1:]:
            yield (
                granularity,
                finest.groupBy(
                    *view.keys, bucket_start(F.col("event_bucket"), GRANULARITIES[granularity]).alias("event_bucket")
                ).agg(F.sum("value").cast("bigint").alias("value")),
            )
    finally:
        finest.unpersist()


def _distinct(view: View, events: DataFrame, ordered: list[str]) -> Iterator[tuple[str, DataFrame]]:
    from pyspark.sql import functions as F

    # collect_set skips nulls: every archived event has its event_time (the contract requires it).
    bucket = event_bucket(GRANULARITIES[ordered[0]])
    seen = (
        view.filtered(events)
        .where(_keys_present(view))
        .groupBy(
            *[view.column_of(k).alias(k) for k in view.keys],
            view.distinct_column().alias(_DISTINCT_VALUE),
        )
        .agg(F.collect_set(bucket).alias(_BUCKETS))
        .cache()
    )
    try:
        for granularity in ordered:
            step = GRANULARITIES[granularity]
            buckets = F.expr(f"array_distinct(transform({_BUCKETS}, b -> CAST(floor(b / {step}) * {step} AS BIGINT)))")
            pairs = seen.select(*view.keys, F.explode(buckets).alias("event_bucket"), _DISTINCT_VALUE)
            value = F.col(_DISTINCT_VALUE)
            # As in View.compute: the count of the distinct pairs (a missing value counts for nothing),
            # and the sketch taken through a union, so that its estimate depends on the values alone.
            cells = pairs.groupBy(*view.keys, "event_bucket").agg(
                F.count(value).alias("value"), F.hll_sketch_agg(value, HLL_LG_K).alias(_DISTINCT_VALUE)
            )
            yield (
                granularity,
                cells.select(
                    *view.keys, "event_bucket", "value", F.hll_union(_DISTINCT_VALUE, _DISTINCT_VALUE).alias("sketch")
                ),
            )
    finally:
        seen.unpersist()
