"""The batch layer de-duplicates and caches only the columns its views read (no services needed)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pyspark.testing import assertDataFrameEqual

from batch_layer.job import events_before
from definitions.settings import Settings
from definitions.spark import WINDOW_GROUP_LIMIT, batch_session_options
from definitions.views import BUILT_IN, PAGE_VIEWS, PAGE_VIEWS_BY_CHANNEL, UNIQUE_VISITORS, View, read_columns
from stores.master import first_copies, master_ddl

T0 = datetime(2026, 11, 20, 10, 0, 0)  # naive = UTC in the test session
CUTOFF_MS = int(datetime(2026, 11, 20, 12, 0, 0, tzinfo=UTC).timestamp() * 1000)


def record(event_id, minute, user, url, partition, offset, ingest_minute, kind="page_view", country="DE"):
    ingest = T0.replace(minute=ingest_minute)
    return (
        event_id,
        T0.replace(minute=minute),
        user,
        url,
        kind,
        "https://referrer.example/" + event_id,
        country,
        "mobile",
        2 if offset % 2 else 1,
        "app" if offset % 2 else None,
        partition,
        offset,
        ingest,
        ingest.date(),
        ingest.hour,
    )


@pytest.fixture(scope="module")
def master(spark):
    rows = [
        record("e1", 0, "u1", "/", 0, 10, 1),
        record("e1", 5, "u9", "/other", 1, 3, 2),  # a later copy of e1: dropped
        record("e2", 1, "u2", "/", 1, 4, 2),
        record("e3", 2, "u1", "/a", 0, 11, 3, kind="click"),
        record("e4", 3, "u3", "/a", 1, 5, 3, country=None),
        record("e4", 3, "u3", "/a", 0, 12, 3, country=None),  # same ingest time, earlier partition: kept
        record("e5", 4, "u4", "/b", 0, 13, 4),
    ]
    return spark.createDataFrame(rows, master_ddl())


def columns(view: View, master) -> set[str]:
    return set(read_columns([view], master))


def test_a_view_reads_its_time_keys_column_filter_and_defaults(master):
    assert columns(PAGE_VIEWS, master) == {"event_time", "url", "event_type"}
    assert columns(UNIQUE_VISITORS, master) == {"event_time", "url", "user_id", "event_type"}
    # a default for channel is decided by schema_version
    assert columns(PAGE_VIEWS_BY_CHANNEL, master) == {"event_time", "channel", "event_type", "schema_version"}


def test_filter_columns_are_resolved_as_spark_resolves_them(master):
    cased = View("cased", keys=("url",), aggregation="count", where="upper(`Country`) = 'DE' AND DEVICE IS NOT NULL")
    assert columns(cased, master) == {"event_time", "url", "country", "device"}
    literal = View("literal", keys=("url",), aggregation="count", where="event_type = 'referrer'")
    assert columns(literal, master) == {"event_time", "url", "event_type"}


def test_a_filter_over_every_column_reads_every_column(master):
    star = View("star", keys=("url",), aggregation="count", where="hash(struct(*)) % 2 = 0")
    assert set(read_columns([star], master)) == set(master.columns)


def test_columns_keep_the_frames_order_and_unite_the_views(master):
    got = read_columns(BUILT_IN, master)
    assert got == [c for c in master.columns if c in set(got)]
    assert set(got) == {"event_time", "user_id", "url", "event_type", "country", "device", "schema_version", "channel"}


def test_events_before_keeps_first_copies_of_the_read_columns_only(master):
    pruned = events_before(master, CUTOFF_MS, [PAGE_VIEWS, UNIQUE_VISITORS])
    assert pruned.columns == ["event_time", "user_id", "url", "event_type"]
    full = first_copies(master)
    for view in (PAGE_VIEWS, UNIQUE_VISITORS):
        for granularity in view.granularities:
            assertDataFrameEqual(view.compute(pruned, granularity), view.compute(full, granularity))
    assert sorted(r.user_id for r in pruned.collect()) == ["u1", "u1", "u2", "u3", "u4"]


def test_events_before_never_reads_unused_columns_from_storage(master, tmp_path):
    master.write.partitionBy("ingest_date", "ingest_hour").parquet(f"file://{tmp_path}/m")
    stored = master.sparkSession.read.schema(master_ddl()).parquet(f"file://{tmp_path}/m")
    plan = events_before(stored, CUTOFF_MS, [PAGE_VIEWS])._jdf.queryExecution().executedPlan().toString()
    read = plan[plan.index("ReadSchema: ") :].split("\n")[0]
    for unused in ("referrer", "user_id", "country", "device", "channel"):
        assert unused not in read, read
    assert "event_id" in read and "kafka_partition" in read  # what de-duplication itself needs


def test_events_before_applies_the_cutoff(master):
    early = int(T0.replace(minute=4, tzinfo=UTC).timestamp() * 1000)  # ingested at minutes 1 to 3
    assert sorted(r.url for r in events_before(master, early, [PAGE_VIEWS]).collect()) == ["/", "/", "/a", "/a"]


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York", "Asia/Kolkata"])
def test_the_cutoff_does_not_move_with_the_local_time_zone(master, monkeypatch, zone):
    """The Python process of `lambdactl batch` or an Airflow worker may run in any time zone; the
    cutoff is an instant, and Spark compares ingest times in UTC."""
    import time

    early = int(T0.replace(minute=4, tzinfo=UTC).timestamp() * 1000)
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        kept = sorted(r.url for r in events_before(master, early, [PAGE_VIEWS]).collect())
    finally:
        monkeypatch.undo()
        time.tzset()
    assert kept == ["/", "/", "/a", "/a"]


def test_a_batch_sessions_de_duplication_sorts_the_records_once(master, tmp_path):
    """Spark's WindowGroupLimit sorts every record before the shuffle as well as after it; a batch
    run's session turns it off (definitions.spark.batch_session_options), and the copies kept are
    the same."""
    spark = master.sparkSession
    key = WINDOW_GROUP_LIMIT
    option = batch_session_options(Settings(state_dir=tmp_path))[key]
    before = spark.conf.get(key)

    def planned():
        frame = events_before(master, CUTOFF_MS, [PAGE_VIEWS, UNIQUE_VISITORS])
        return frame, frame._jdf.queryExecution().executedPlan().toString()

    try:
        spark.conf.unset(key)
        default, plan = planned()
        assert "WindowGroupLimit" in plan, "Spark's default plans the early limit"
        kept = sorted(default.collect())
        spark.conf.set(key, option)
        turned_off, plan = planned()
        assert "WindowGroupLimit" not in plan and plan.count("Sort [event_id") == 1, plan
        assert sorted(turned_off.collect()) == kept
    finally:
        spark.conf.set(key, before)
