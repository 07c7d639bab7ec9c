"""The batch job's computations (batch_layer/computations.py): shared and rolled-up frames give
exactly what each view computes from the events on its own."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest
from pyspark.sql import Row

from batch_layer.computations import computation_of, computations, rolled_up
from definitions.views import BUILT_IN, PAGE_VIEWS, TOP_PAGES, UNIQUE_VISITORS, View

SCHEMA = (
    "event_id STRING, event_time TIMESTAMP, user_id STRING, url STRING, event_type STRING, "
    "referrer STRING, country STRING, device STRING, channel STRING, schema_version INT"
)
PURCHASES = View(
    "versions_per_country",
    keys=("country",),
    aggregation="sum",
    column="schema_version",
    where="event_type = 'purchase'",
    granularities=("minute", "day"),  # no hour: a day rolls up from minutes
)
DAILY_ONLY = View(
    "page_views_daily", keys=("url",), aggregation="count", where="event_type = 'page_view'", granularities=("day",)
)


@pytest.fixture(scope="module")
def events(spark):
    """Three days of events around midnights and hour edges, keys missing now and then, two schema
    versions (the channel default applies to version 1)."""
    rng = random.Random(7)
    start = datetime(2026, 11, 20, 22, 30)
    rows = []
    for i in range(3_000):
        version = rng.choice([1, 2])
        rows.append(
            Row(
                event_id=f"e{i}",
                event_time=start + timedelta(seconds=rng.randrange(0, 3 * 86_400)),
                user_id=f"u{rng.randrange(40)}",
                url=rng.choice(["/", "/a", "/b", None]),
                event_type=rng.choice(["page_view", "page_view", "click", "purchase"]),
                referrer=None,
                country=rng.choice(["DE", "FR", None]),
                device=rng.choice(["mobile", "desktop"]),
                channel=rng.choice(["app", "web"]) if version == 2 else None,
                schema_version=version,
            )
        )
    return spark.createDataFrame(rows, SCHEMA)


def _rows(frame) -> list[tuple]:
    return sorted(tuple(bytes(v) if isinstance(v, bytearray) else v for v in r) for r in frame.collect())


def test_every_view_and_granularity_equals_its_own_computation(events):
    views = [*BUILT_IN, PURCHASES, DAILY_ONLY]
    seen = []
    for view, granularity, frame in computations(events, views):
        seen.append((view.name, granularity))
        assert frame.columns == view.compute(events, granularity).columns
        assert _rows(frame) == _rows(view.compute(events, granularity)), f"{view.name}/{granularity}"
    assert sorted(seen) == sorted((v.name, g) for v in views for g in v.granularities)


def test_views_computing_the_same_share_one_frame_per_granularity(events):
    assert computation_of(PAGE_VIEWS) == computation_of(TOP_PAGES) == computation_of(DAILY_ONLY)
    frames: dict[tuple[str, str], object] = {}
    for view, granularity, frame in computations(events, [PAGE_VIEWS, UNIQUE_VISITORS, TOP_PAGES, DAILY_ONLY]):
        frames[(view.name, granularity)] = frame
        frame.count()
    for granularity in ("minute", "hour", "day"):
        assert frames[("page_views", granularity)] is frames[("top_pages", granularity)]
    assert frames[("page_views_daily", "day")] is frames[("page_views", "day")]
    assert frames[("unique_visitors", "day")] is not frames[("page_views", "day")]


def test_only_the_finest_granularity_of_an_additive_view_reads_the_events(events, monkeypatch):
    computed = []
    own = View.compute

    def compute(view, frame, granularity, *args, **kwargs):
        computed.append((view.name, granularity))
        return own(view, frame, granularity, *args, **kwargs)

    monkeypatch.setattr(View, "compute", compute)
    for _, _, frame in computations(events, [PAGE_VIEWS, UNIQUE_VISITORS, TOP_PAGES, PURCHASES]):
        frame.count()
    assert computed == [
        ("page_views", "minute"),  # hour and day rolled up from it; top_pages shares all three
        ("unique_visitors", "minute"),  # a distinct count does not add up: each granularity reads the events
        ("unique_visitors", "hour"),
        ("unique_visitors", "day"),
        ("versions_per_country", "minute"),  # its day from its minutes
    ]


def test_frames_are_released_when_done(events, spark):
    frames = [frame for _, _, frame in computations(events, [PAGE_VIEWS])]
    assert all(f.count() >= 0 for f in frames)
    assert not any(f.storageLevel.useMemory or f.storageLevel.useDisk for f in frames)


def test_a_distinct_count_is_never_rolled_up(events):
    with pytest.raises(ValueError, match="does not add up"):
        rolled_up(UNIQUE_VISITORS.compute(events, "minute"), UNIQUE_VISITORS, "hour")
