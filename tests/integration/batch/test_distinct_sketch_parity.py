"""A distinct view's two layers sketch the same values the same way: the merged answer unions a
batch sketch with realtime ones, and a value hashed as a number in one and as text in the other
lands in other registers (one value counted twice, before and after every swap).

Spark only (local session): the batch's View.compute against the speed layer's own cells()."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import functions as F

from definitions.views import HLL_LG_K, View, cells
from stores.master import master_ddl


@pytest.mark.parametrize("column", ["schema_version", "user_id"])
def test_batch_and_speed_sketches_of_the_same_values_union_to_their_count(spark, column):
    view = View(name="versions_seen", keys=("url",), aggregation="distinct", column=column, granularities=("hour",))
    at = dt.datetime(2026, 11, 30, 8, 0, tzinfo=dt.UTC)
    fields = [f.split()[0] for f in master_ddl().split(", ")]
    rows = []
    for n, (user, version) in enumerate([("u1", 1), ("u2", 2), ("u1", 2), ("u3", 1)]):
        doc = dict.fromkeys(fields)
        doc.update(
            event_id=f"e{n}", event_time=at, user_id=user, url="/a", event_type="page_view", schema_version=version
        )
        rows.append(tuple(doc[f] for f in fields))
    events = spark.createDataFrame(rows, master_ddl())

    batch = view.compute(events, "hour").select("sketch")
    speed = (
        events.select(F.explode(F.array(*cells(view))).alias("c"))
        .where("c IS NOT NULL")
        .groupBy("c.key", "c.event_bucket")
        .agg(F.hll_sketch_agg("c.distinct_value", HLL_LG_K).alias("sketch"))
        .select("sketch")
    )
    merged = batch.union(speed).agg(F.hll_sketch_estimate(F.hll_union_agg("sketch")).alias("n")).first()
    assert merged is not None
    assert merged["n"] == 2 if column == "schema_version" else merged["n"] == 3
