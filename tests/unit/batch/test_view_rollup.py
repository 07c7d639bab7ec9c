"""definitions.view_rollup: every granularity at once gives View.compute's cells, cell for cell."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from definitions.view_rollup import compute_each
from definitions.views import BUILT_IN, UNIQUE_VISITORS, View

SUMMED = View("versions", keys=("country",), aggregation="sum", column="schema_version")
HOURLY_DISTINCT = View(
    "devices", keys=("country", "device"), aggregation="distinct", column="user_id", granularities=("day", "hour")
)
OF_TWO_VERSIONS = View(
    "by_channel_users",
    keys=("channel",),
    aggregation="distinct",
    column="user_id",
    where="event_type <> 'click'",
    defaults={"channel": "web"},
)
MINUTE_AND_DAY = View(
    "sparse", keys=("url",), aggregation="distinct", column="user_id", granularities=("minute", "day")
)
VISITORS_THEMSELVES = View("visitors", keys=("user_id", "url"), aggregation="distinct", column="user_id")
# Distinct numbers and times: counted as their text in both layers (View.distinct_column). The rollup
# sketched the number itself, whose hash differs from its text's, so the merged answer's union of a
# batch and a realtime sketch counted each value twice; a time it could not sketch at all.
VERSIONS_SEEN = View("versions_seen", keys=("url",), aggregation="distinct", column="schema_version")
TIMES_SEEN = View("times_seen", keys=("country",), aggregation="distinct", column="event_time")
VIEWS = [
    *BUILT_IN,
    SUMMED,
    HOURLY_DISTINCT,
    OF_TWO_VERSIONS,
    MINUTE_AND_DAY,
    VISITORS_THEMSELVES,
    VERSIONS_SEEN,
    TIMES_SEEN,
]


@pytest.fixture(scope="module")
def events(spark):
    """Events over a day and a half, four within seconds every ~4 minutes, crossing minute, hour and day boundaries: users and
    URLs that repeat within and across buckets, missing users and countries,
    three schema versions."""
    n = 2_000
    return spark.range(0, n, numPartitions=3).select(
        F.col("id").cast("string").alias("event_id"),
        F.timestamp_seconds(F.lit(1_795_000_000) + F.floor(F.col("id") / 4) * 250 + (F.col("id") % 4) * 3).alias(
            "event_time"
        ),
        F.when(F.col("id") % 17 == 0, F.lit(None))
        .otherwise(F.concat(F.lit("u"), (F.floor(F.col("id") / 3) % 40).cast("string")))
        .alias("user_id"),
        F.concat(F.lit("/p"), (F.floor(F.col("id") / 2) % 9).cast("string")).alias("url"),
        F.when(F.col("id") % 4 == 0, F.lit("click")).otherwise(F.lit("page_view")).alias("event_type"),
        F.when(F.col("id") % 13 == 0, F.lit(None))
        .otherwise(F.element_at(F.array(*map(F.lit, ["DE", "FR", "US"])), (F.col("id") % 3 + 1).cast("int")))
        .alias("country"),
        F.element_at(F.array(*map(F.lit, ["mobile", "desktop"])), (F.col("id") % 2 + 1).cast("int")).alias("device"),
        (F.col("id") % 3 + 1).cast("int").alias("schema_version"),
        F.when(F.col("id") % 3 == 0, F.lit(None)).otherwise(F.lit("app")).alias("channel"),
    )


def assert_same_cells(got, expected, view: View) -> None:
    """The same cells, values and columns; a distinct view's sketches hold the same values: the union of
    the two estimates what the expected one alone does (a sketch of other values would add to it)."""
    assert got.columns == expected.columns
    assert expected.count() > 0
    if "sketch" not in expected.columns:
        assertDataFrameEqual(got, expected)
        return
    assertDataFrameEqual(got.drop("sketch"), expected.drop("sketch"))
    on = [*view.keys, "event_bucket"]
    joined = (
        got.alias("g")
        .join(expected.alias("e"), on)
        .select(
            *on,
            F.hll_sketch_estimate("g.sketch").alias("got"),
            F.hll_sketch_estimate("e.sketch").alias("expected"),
            F.hll_sketch_estimate(F.hll_union("g.sketch", "e.sketch")).alias("united"),
        )
    )
    differing = joined.where("got <> expected OR united <> expected").limit(5).collect()
    assert not differing, differing


@pytest.mark.parametrize("view", VIEWS, ids=lambda v: v.name)
def test_every_granularity_equals_computing_it_alone(events, view):
    seen = []
    for granularity, cells in compute_each(view, events):  # compared while what they derive from is cached
        assert_same_cells(cells, view.compute(events, granularity), view)
        seen.append(granularity)
    assert sorted(seen) == sorted(view.granularities)


def test_finest_first_and_the_cache_released_at_the_end(spark, events):
    before = {id(x) for x in spark.sparkContext._jsc.getPersistentRDDs().values()}
    order = []
    for granularity, cells in compute_each(UNIQUE_VISITORS, events):
        order.append(granularity)
        cells.count()
        assert len(spark.sparkContext._jsc.getPersistentRDDs()) > len(before)
    assert order == ["minute", "hour", "day"]
    assert len(spark.sparkContext._jsc.getPersistentRDDs()) == len(before)


@pytest.mark.parametrize("view", [BUILT_IN.views[0], UNIQUE_VISITORS], ids=lambda v: v.name)
def test_coarser_granularities_do_not_read_the_events_again(events, view):
    """The hour and day cells come from what the finest computed (cached), not from another pass over
    the events: no filter on the event type below their aggregation."""
    checked = []
    for granularity, cells in compute_each(view, events):  # the cache lives while the generator runs
        if granularity != "minute":
            plan = cells._jdf.queryExecution().optimizedPlan().toString()
            assert "InMemoryRelation" in plan, plan
            assert "Range (" not in plan.split("InMemoryRelation")[0], plan
            checked.append(granularity)
    assert checked == ["hour", "day"]


def test_a_generator_closed_early_releases_its_cache(spark, events):
    before = len(spark.sparkContext._jsc.getPersistentRDDs())
    for view in (UNIQUE_VISITORS, BUILT_IN.views[0]):
        each = compute_each(view, events)
        _, minute = next(each)
        minute.count()
        assert len(spark.sparkContext._jsc.getPersistentRDDs()) > before
        each.close()  # as when the job fails while loading a granularity
        assert len(spark.sparkContext._jsc.getPersistentRDDs()) == before, view.name
