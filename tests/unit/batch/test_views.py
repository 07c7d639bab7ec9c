"""View declarations computed on tiny in-memory DataFrames (no services needed)."""

from __future__ import annotations

import dataclasses
from datetime import datetime

import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from definitions.views import (
    BUILT_IN,
    PAGE_VIEWS,
    PAGE_VIEWS_BY_CHANNEL,
    PAGE_VIEWS_BY_COUNTRY_DEVICE,
    TOP_PAGES,
    UNIQUE_VISITORS,
    Registry,
    View,
    cells,
)

T0 = datetime(2026, 11, 20, 10, 0, 0)  # naive = UTC in the test session
EVENT_SCHEMA = (
    "event_id STRING, event_time TIMESTAMP, user_id STRING, url STRING, event_type STRING, "
    "referrer STRING, country STRING, device STRING, schema_version INT"
)


def ev(
    minute: int,
    url: str,
    user: str,
    kind: str = "page_view",
    country: str | None = "DE",
    device: str | None = "mobile",
    second: int = 0,
) -> Row:
    return Row(
        event_id=f"{url}-{user}-{minute}-{second}-{kind}",
        event_time=T0.replace(minute=minute, second=second),
        user_id=user,
        url=url,
        event_type=kind,
        referrer=None,
        country=country,
        device=device,
        schema_version=1,
    )


@pytest.fixture(scope="module")
def events(spark):
    rows = [
        ev(0, "/", "u1"),
        ev(0, "/", "u1", second=30),
        ev(0, "/", "u2"),
        ev(1, "/", "u3"),
        ev(0, "/a", "u1"),
        ev(0, "/a", "u1", kind="click"),
        ev(59, "/a", "u4", country=None),
    ]
    return spark.createDataFrame(rows, EVENT_SCHEMA)


def test_page_views_count_page_view_events_per_url_and_bucket(spark, events):
    got = PAGE_VIEWS.compute(events, "minute").select("url", "event_bucket", "value")
    base = int(T0.timestamp())
    expected = spark.createDataFrame(
        [("/", base, 3), ("/", base + 60, 1), ("/a", base, 1), ("/a", base + 59 * 60, 1)],
        "url STRING, event_bucket BIGINT, value BIGINT",
    )
    assertDataFrameEqual(got, expected)
    hourly = PAGE_VIEWS.compute(events, "hour").select("url", "event_bucket", "value")
    assertDataFrameEqual(
        hourly,
        spark.createDataFrame([("/", base, 4), ("/a", base, 2)], "url STRING, event_bucket BIGINT, value BIGINT"),
    )


def test_unique_visitors_exact_and_sketch(spark, events):
    from datasketches import hll_sketch

    got = {r.url: r for r in UNIQUE_VISITORS.compute(events, "hour").collect()}
    assert got["/"].value == 3 and got["/a"].value == 2
    assert round(hll_sketch.deserialize(bytes(got["/"].sketch)).get_estimate()) == 3


def test_distinct_counts_values_not_events_and_skips_missing_values(spark, events):
    """The exact count is of distinct values: an event without one (no user) counts for nothing, and
    a bucket whose events all lack one is 0, as countDistinct has it; extra keys split the groups."""
    from datasketches import hll_sketch
    from pyspark.sql import functions as F

    extra = spark.createDataFrame([ev(0, "/", None), ev(5, "/n", None), ev(5, "/n", None, second=9)], EVENT_SCHEMA)
    rows = events.unionByName(extra).withColumn("part", F.when(F.col("user_id") == "u2", 1).otherwise(0))
    exact = F.countDistinct("user_id").alias("value")
    expected = (
        UNIQUE_VISITORS.filtered(rows)
        .groupBy("url", (F.floor(F.unix_seconds("event_time") / 3600) * 3600).cast("bigint").alias("event_bucket"))
        .agg(exact)
    )
    assertDataFrameEqual(UNIQUE_VISITORS.compute(rows, "hour").select("url", "event_bucket", "value"), expected)
    got = {r.url: r for r in UNIQUE_VISITORS.compute(rows, "hour").collect()}
    assert got["/n"].value == 0 and hll_sketch.deserialize(bytes(got["/n"].sketch)).is_empty()
    for extra in (["part"], (k for k in ["part"])):  # any iterable of extra keys, a generator too
        split = UNIQUE_VISITORS.compute(rows, "minute", extra_keys=extra).where("url = '/'")
        assert sorted((r.event_bucket % 3600, r.part, r.value) for r in split.collect()) == [
            (0, 0, 1),
            (0, 1, 1),
            (60, 0, 1),
        ]


def test_a_distinct_cells_estimate_does_not_depend_on_how_spark_split_the_work(spark):
    """Built by updates in one order, a sketch's own estimate (HIP) depends on that order; the batch
    layer's sketch is a union, estimated from its registers alone, so a recompute of the same events
    answers the same whatever the partitioning."""
    from datasketches import hll_sketch
    from pyspark.sql import functions as F

    events = spark.range(0, 30_000, numPartitions=4).select(
        F.timestamp_seconds(F.lit(1_795_000_000)).alias("event_time"),
        F.concat(F.lit("u"), ((F.col("id") * 7919) % 10_000).cast("string")).alias("user_id"),
        F.lit("/").alias("url"),
        F.lit("page_view").alias("event_type"),
        F.lit(1).alias("schema_version"),
    )
    estimates = {
        hll_sketch.deserialize(bytes(UNIQUE_VISITORS.compute(frame, "hour").first().sketch)).get_estimate()
        for frame in (events, events.repartition(3), events.repartition(1), events.coalesce(2))
    }
    assert len(estimates) == 1, estimates


def test_distinct_builds_one_sketch_per_cell_not_per_value(spark, events):
    """countDistinct beside the sketch makes Spark group by the counted column first and build a
    sketch for every (key, bucket, value): millions of sketch objects. The exact count and the
    sketch come from the distinct (key, bucket, value) rows instead, one sketch per cell."""
    import re

    plan = UNIQUE_VISITORS.compute(events, "minute")._jdf.queryExecution().executedPlan().toString()
    sketching = [line for line in plan.splitlines() if "hll_sketch_agg" in line]
    assert sketching, plan
    for line in sketching:  # grouped by the cell alone: the view's key and the bucket
        keys = re.search(r"keys=\[([^\]]*)\]", line)
        assert keys is not None, line
        assert {re.sub(r"#\d+L?$", "", k.strip()) for k in keys.group(1).split(",")} == {"url", "event_bucket"}, line


def test_speed_layer_form_keeps_extra_keys_and_only_the_sketch(spark, events):
    from pyspark.sql import functions as F

    with_ingest = events.withColumn("ingest_bucket", F.lit(123))
    got = UNIQUE_VISITORS.compute(with_ingest, "day", extra_keys=["ingest_bucket"], exact=False)
    assert got.columns == ["url", "event_bucket", "ingest_bucket", "sketch"]


def test_events_without_a_key_value_are_not_in_the_view(spark, events):
    got = PAGE_VIEWS_BY_COUNTRY_DEVICE.compute(events, "day").select("country", "device", "value").collect()
    assert sorted(tuple(r) for r in got) == [("DE", "mobile", 5)]


def test_top_pages_is_page_views_laid_out_by_bucket(spark, events):
    a = TOP_PAGES.compute(events, "hour").select("url", "event_bucket", "value")
    b = PAGE_VIEWS.compute(events, "hour").select("url", "event_bucket", "value")
    assertDataFrameEqual(a, b)
    assert TOP_PAGES.layout == "by_bucket" and PAGE_VIEWS.layout == "by_key"


def test_sum_view(spark):
    view = View(
        "purchases_per_device",
        keys=("device",),
        aggregation="sum",
        column="schema_version",
        where="event_type = 'purchase'",
        granularities=("day",),
    )
    df = spark.createDataFrame(
        [
            ev(1, "/c", "u1", kind="purchase"),
            ev(2, "/c", "u2", kind="purchase", device="desktop"),
            ev(3, "/c", "u3", kind="purchase"),
        ],
        EVENT_SCHEMA,
    )
    assert sorted(tuple(r) for r in view.compute(df, "day").select("device", "value").collect()) == [
        ("desktop", 1),
        ("mobile", 2),
    ]


def test_declarations_are_checked():
    with pytest.raises(ValueError, match="unknown event column"):
        View("x", keys=("page",), aggregation="count")
    with pytest.raises(ValueError, match="needs a column"):
        View("x", keys=("url",), aggregation="distinct")
    with pytest.raises(ValueError, match="granularities"):
        View("x", keys=("url",), aggregation="count", granularities=("week",))
    with pytest.raises(ValueError, match="additive"):
        View("x", keys=("url",), aggregation="distinct", column="user_id", layout="by_bucket")
    with pytest.raises(ValueError, match="named twice"):
        View("x", keys=("url", "url"), aggregation="count")
    # A sum of a text column failed on the first event whose value was no number (Spark's ANSI
    # cast), in both layers, at every restart of the speed layer.
    with pytest.raises(ValueError, match="sum needs a number column; country is a string"):
        View("x", keys=("url",), aggregation="sum", column="country")
    View("x", keys=("url",), aggregation="sum", column="schema_version")
    with pytest.raises(ValueError, match="declared twice"):
        Registry((PAGE_VIEWS, PAGE_VIEWS))


def test_a_view_name_is_short_enough_for_every_name_made_from_it():
    """Table, shadow, replay-mark and HDFS file names are made from a view's name: one of 201
    characters was never listed as replaying, and its replay's switch failed on HDFS's 255 bytes."""
    from definitions.view_versions import storage_name
    from lambdactl.replay_orphans import unreferenced_shadows
    from stores.replays import _mark_name, shadow_name

    longest = "v" * 64
    View(longest, keys=("url",), aggregation="count")
    storage = storage_name(longest, "f" * 64)
    mark = f"{storage}.switched-{'9' * 16}.json"
    assert len(mark.encode()) <= 255 and _mark_name(mark) is not None
    assert unreferenced_shadows([shadow_name(storage, 9 * 10**15)], {}, {}) == {shadow_name(storage, 9 * 10**15)}
    with pytest.raises(ValueError, match="at most 64 characters"):
        View("v" * 65, keys=("url",), aggregation="count")


@pytest.mark.parametrize(
    "name",
    ["seiten_\u00e4", "\uff50\uff41\uff47\uff45", "\ufb01le", "\U0001d51e" * 64],
    ids=["umlaut", "fullwidth", "ligature", "64-math-letters"],
)
def test_a_view_name_is_ascii(name):
    """Python identifiers take letters of any script, but HBase table names are ASCII letters, digits
    and `_` only, and 64 of some letters made a 259-byte table name: such a view was declared, the
    speed layer maintained it, and every batch run then failed on its table."""
    assert name.isidentifier()
    with pytest.raises(ValueError, match="ASCII"):
        View(name, keys=("url",), aggregation="count")


def test_built_in_views():
    assert BUILT_IN.names() == [
        "page_views",
        "unique_visitors",
        "top_pages",
        "page_views_by_country_device",
        "page_views_by_channel",
    ]


# --- a field added by schema_version 2, and a view's declared default for older events ----------

V2_SCHEMA = EVENT_SCHEMA + ", channel STRING"


def versioned(minute: int, version: int, channel: str | None, kind: str = "page_view") -> Row:
    return Row(**ev(minute, "/", f"u{minute}", kind=kind).asDict() | {"schema_version": version, "channel": channel})


@pytest.fixture(scope="module")
def versioned_events(spark):
    rows = [
        versioned(0, 1, None),  # older producers: no channel, counted as the default (web)
        versioned(1, 1, None),
        versioned(2, 2, "web"),
        versioned(3, 2, "app"),
        versioned(4, 2, "app"),
        versioned(5, 2, None),  # version 2 without a channel: not defaulted, not in the view
        versioned(6, 1, None, kind="click"),
    ]
    return spark.createDataFrame(rows, V2_SCHEMA)


def test_a_default_stands_in_for_a_later_field_in_older_events(spark, versioned_events):
    got = PAGE_VIEWS_BY_CHANNEL.compute(versioned_events, "hour").select("channel", "value")
    assertDataFrameEqual(got, spark.createDataFrame([("web", 3), ("app", 2)], "channel STRING, value BIGINT"))


def test_the_speed_layers_cells_apply_the_same_default(spark, versioned_events):
    from pyspark.sql import functions as F

    exploded = versioned_events.select(F.explode(F.array(*cells(PAGE_VIEWS_BY_CHANNEL))).alias("c")).where(
        "c IS NOT NULL AND c.granularity = 'hour'"
    )
    got = exploded.groupBy(F.col("c.key")[0].alias("channel")).count()
    assertDataFrameEqual(got, spark.createDataFrame([("web", 3), ("app", 2)], "channel STRING, count BIGINT"))


def test_defaults_are_declared_for_later_fields_only():
    with pytest.raises(ValueError, match="unknown event column 'chanel'"):
        View("x", keys=("url",), aggregation="count", defaults={"chanel": "web"})
    with pytest.raises(ValueError, match="every schema version has"):
        View("x", keys=("url",), aggregation="count", defaults={"device": "desktop"})
    with pytest.raises(ValueError, match="must be a string among"):
        View("x", keys=("channel",), aggregation="count", defaults={"channel": "fax"})
    hash(PAGE_VIEWS_BY_CHANNEL)  # still a value: hashable, comparable
    fields = {f.name: getattr(PAGE_VIEWS_BY_CHANNEL, f.name) for f in dataclasses.fields(View)}
    assert PAGE_VIEWS_BY_CHANNEL == View(**{**fields, "defaults": {"channel": "web"}})
