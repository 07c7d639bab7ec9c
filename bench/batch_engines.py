"""The batch job's computation over a synthetic master dataset, timed: by Spark through the job's own
code path, and the same by DuckDB as a reference (figures to compare, no HBase writes)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

from batch_dataset import cutoff_ms  # bench/ itself: the scripts run as files

from batch_layer import job
from definitions.events import FIELDS
from definitions.settings import Settings
from definitions.spark import cached
from definitions.view_rollup import compute_each
from definitions.views import BUILT_IN, GRANULARITIES, View
from stores.batch_writer import TableStats, computed_stats
from stores.master import read_archived

# --- Spark: the batch job's computation ------------------------------------------------------------


def spark_events(spark, settings: Settings, url: str, views: list[View] | None = None):
    """`job.deduplicated_events` over the local copy for `views` (every built-in view by default),
    cached and counted as run_batch does."""
    views = list(BUILT_IN) if views is None else views
    with mock.patch.object(job, "read_master", lambda spark, settings: read_archived(spark, url)):
        events = job.deduplicated_events(spark, settings, cutoff_ms(), views).cache()
    return events, events.count()


def cached_stats(view: View, computed) -> TableStats:
    """What write_partitions does before its puts: cache the view and take the verified figures."""
    with cached(computed) as computed:  # as the writers: a frame cached by compute_each stays cached
        return computed_stats(view, computed)


def spark_recompute(spark, settings: Settings, url: str) -> dict:
    started = time.monotonic()
    events, distinct = spark_events(spark, settings, url)
    dedup_s = time.monotonic() - started
    stats = {}
    try:
        for view in BUILT_IN:
            for granularity, computed in compute_each(view, events):
                stats[f"{view.name}/{granularity}"] = cached_stats(view, computed)
    finally:
        events.unpersist(blocking=True)
    total = time.monotonic() - started
    return {
        "seconds": total,
        "dedup_seconds": dedup_s,
        "views_seconds": total - dedup_s,
        "events": distinct,
        "stats": stats,
    }


# --- DuckDB: the same computation ------------------------------------------------------------------


def duckdb_sql(view: View, granularity: str) -> str:
    """The view at one granularity, reduced to (rows, cells, checksum) as cached_stats does."""
    size = GRANULARITIES[granularity]
    value = {
        "count": "count(*)",
        "sum": f"CAST(sum({view.column}) AS BIGINT)",
        "distinct": f"count(DISTINCT {view.column})",
    }[view.aggregation]
    # A declared default stands in for a field in events older than the version that added it.
    since = {f.name: f.since for f in FIELDS}
    column = {k: f"CASE WHEN schema_version < {since[k]} THEN '{v}' ELSE {k} END" for k, v in view.defaults}
    key = lambda k: column.get(k, k)  # noqa: E731
    where = " AND ".join([f"({view.where})" if view.where else "TRUE", *[f"{key(k)} IS NOT NULL" for k in view.keys]])
    rows = "count(*)" if view.layout == "by_key" else "count(DISTINCT event_bucket)"
    return (
        f"SELECT {rows}, count(*), coalesce(sum(value), 0) FROM ("
        f" SELECT {', '.join(f'{key(k)} AS {k}' for k in view.keys)}, CAST(floor(epoch(event_time) / {size}) * {size} AS BIGINT) AS event_bucket, {value} AS value"
        f" FROM events WHERE {where} GROUP BY ALL)"
    )


def duckdb_recompute(con, folder: Path) -> dict:
    cutoff = datetime.fromtimestamp(cutoff_ms() / 1000, UTC)
    started = time.monotonic()
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE events AS
        SELECT * FROM read_parquet('{folder}/*/*/*.parquet', hive_partitioning = true)
        WHERE ingest_date <= DATE '{cutoff.date()}' AND ingest_time < TIMESTAMP '{cutoff:%Y-%m-%d %H:%M:%S}'
        QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY ingest_time, kafka_partition, kafka_offset) = 1
    """)
    distinct = con.execute("SELECT count(*) FROM events").fetchone()[0]
    dedup_s = time.monotonic() - started
    stats = {}
    for view in BUILT_IN:
        for granularity in view.granularities:
            rows, cells, checksum = con.execute(duckdb_sql(view, granularity)).fetchone()
            stats[f"{view.name}/{granularity}"] = TableStats(int(rows), int(cells), int(checksum))
    total = time.monotonic() - started
    con.execute("DROP TABLE events")
    return {
        "seconds": total,
        "dedup_seconds": dedup_s,
        "views_seconds": total - dedup_s,
        "events": distinct,
        "stats": stats,
    }
