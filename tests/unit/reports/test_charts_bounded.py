"""A report's drift chart stays a bounded page: one bar per ingest bucket with cells was drawn
whatever their number (1 s buckets over a two-day realtime TTL: ~170k bars, ~30 MB of SVG, ~70 s
per report). Past the limit, neighbouring buckets are drawn together: their sums, and their largest drift."""

from __future__ import annotations

from definitions.times import iso_s
from reports.charts import drift_chart
from reports.compare import merge_buckets


def series(n: int, start: int = 1_700_000_000) -> list[dict]:
    return [
        {
            "ingest_bucket": start + i,
            "time": iso_s(start + i),
            "speed": 3,
            "batch": 2,
            "drift": 1,
            "abs_error": 1,
            "cells": 2,
            "duplicates": i % 2,
        }
        for i in range(n)
    ]


def test_many_buckets_are_drawn_together_with_their_sums_and_their_largest_drift():
    long = series(10_001)
    long[1]["drift"], long[2]["drift"] = 7, -9  # opposite signs in one group: -9 is shown, not -1
    merged = merge_buckets(long, limit=400)
    assert len(merged) <= 400
    for key in ("speed", "batch", "abs_error", "cells"):
        assert sum(d[key] for d in merged) == sum(d[key] for d in long), key
    assert merged[0]["drift"] == -9 and merged[1]["drift"] == 1
    assert merged[0]["time"] == long[0]["time"] and merged[0]["ingest_bucket"] == long[0]["ingest_bucket"]
    assert merge_buckets(long[:400], limit=400) == long[:400], "short series unchanged"


def test_the_chart_of_a_long_series_is_as_small_as_a_short_ones():
    short = len(drift_chart(series(400), "drift"))
    long = len(drift_chart(series(20_000), "drift"))
    assert long < 1.5 * short, (short, long)
