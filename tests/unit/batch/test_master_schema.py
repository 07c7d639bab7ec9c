"""The master dataset read with the contract's schema: files archived before a field existed are
read as they are, the field null, and never rewritten (no services needed)."""

from __future__ import annotations

from datetime import date, datetime

from definitions.events import FIELD_NAMES
from stores.master import read_archived


def test_files_from_before_a_field_read_it_as_null(spark, tmp_path):
    old = spark.createDataFrame(
        [
            (
                "e1",
                datetime(2026, 11, 20, 10),
                "u1",
                "/",
                "page_view",
                None,
                "DE",
                "mobile",
                1,
                0,
                7,
                datetime(2026, 11, 20, 10),
            )
        ],
        "event_id STRING, event_time TIMESTAMP, user_id STRING, url STRING, event_type STRING, referrer STRING, "
        "country STRING, device STRING, schema_version INT, kafka_partition INT, kafka_offset BIGINT, ingest_time TIMESTAMP",
    )
    new = old.selectExpr(
        "'e2' AS event_id",
        *[c for c in old.columns if c != "event_id" and c != "schema_version"],
        "2 AS schema_version",
        "'app' AS channel",
    )
    # Two archiver batches into one hour partition: the first written before version 2 existed.
    old.write.parquet(f"file://{tmp_path}/ingest_date=2026-11-20/ingest_hour=10", mode="append")
    new.write.parquet(f"file://{tmp_path}/ingest_date=2026-11-20/ingest_hour=10", mode="append")
    files = sorted(p.name for p in (tmp_path / "ingest_date=2026-11-20" / "ingest_hour=10").glob("*.parquet"))

    rows = {r.event_id: r for r in read_archived(spark, f"file://{tmp_path}").collect()}
    assert set(FIELD_NAMES) <= set(next(iter(rows.values())).asDict())
    assert rows["e1"].channel is None and rows["e1"].schema_version == 1
    assert rows["e2"].channel == "app" and rows["e2"].schema_version == 2
    assert rows["e1"].ingest_date == date(2026, 11, 20) and rows["e1"].ingest_hour == 10
    assert sorted(p.name for p in (tmp_path / "ingest_date=2026-11-20" / "ingest_hour=10").glob("*.parquet")) == files
