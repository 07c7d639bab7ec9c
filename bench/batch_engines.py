"""The batch job's computation over a synthetic master dataset, timed: by Spark through the job's own
code path, and the same by DuckDB as a reference (figures to compare, no HBase writes)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

from batch_dataset import cutoff_ms  # bench/ itself: the scripts run as files

from batch_layer import job
from batch_layer.computations import computation_of, computations
from definitions.events import FIELDS
from definitions.settings import Settings
from definitions.views import BUILT_IN, GRANULARITIES, View
from stores.batch_writer import TableStats, computed_stats
from stores.master import read_archived

# --- Spark: the batch job's computation ------------------------------------------------------------


def spark_events(spark, settings: Settings, url: str):
    """`job.deduplicated_events` over the local copy, cached and counted as run_batch does."""
    with mock.patch.object(job, "read_master", lambda spark, settings: read_archived(spark, url)):
        events = job.deduplicated_events(spark, settings, cutoff_ms()).cache()
    return events, events.count()


def spark_recompute(spark, settings: Settings, url: str) -> dict:
    """The job's computations (each once: batch_layer/computations.py), reduced to the figures the
    job verifies, as write_partitions does before its puts."""
    started = time.monotonic()
    events, distinct = spark_events(spark, settings, url)
    dedup_s = time.monotonic() - started
    stats = {}
    try:
        for view, granularity, computed in computations(events, BUILT_IN):
            stats[f"{view.name}/{granularity}"] = computed_stats(view, computed)
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


def duckdb_view(view: View, granularity: str, finer: tuple[str, int] | None) -> str:
    """The SELECT of a view at one granularity: from the events, or (an additive view) rolled up
    from `finer` = (temp table, its bucket size), as batch_layer/computations.py does."""
    size = GRANULARITIES[granularity]
    if finer is not None:
        keys = ", ".join(view.keys)
        return (
            f"SELECT {keys}, CAST(floor(event_bucket / {size}) * {size} AS BIGINT) AS event_bucket,"
            f" CAST(sum(value) AS BIGINT) AS value FROM {finer[0]} GROUP BY ALL"
        )
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
    return (
        f"SELECT {', '.join(f'{key(k)} AS {k}' for k in view.keys)}, CAST(floor(epoch(event_time) / {size}) * {size} AS BIGINT) AS event_bucket, {value} AS value"
        f" FROM events WHERE {where} GROUP BY ALL"
    )


def duckdb_views(con) -> dict[str, TableStats]:
    """Every built-in view at every granularity, with the job's plan (each computation once, additive
    views rolled up), reduced to (rows, cells, checksum) as computed_stats does."""
    groups: dict[tuple, list[View]] = {}
    for view in BUILT_IN:
        groups.setdefault(computation_of(view), []).append(view)
    stats = {}
    for number, members in enumerate(groups.values()):
        first, finer = members[0], None
        for granularity in sorted({g for v in members for g in v.granularities}, key=GRANULARITIES.__getitem__):
            size = GRANULARITIES[granularity]
            rolled = finer if finer is not None and first.additive and size % finer[1] == 0 else None
            table = f"view_{number}_{granularity}"
            con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS {duckdb_view(first, granularity, rolled)}")
            for view in members:
                if granularity in view.granularities:
                    rows = "count(*)" if view.layout == "by_key" else "count(DISTINCT event_bucket)"
                    found = con.execute(f"SELECT {rows}, count(*), coalesce(sum(value), 0) FROM {table}").fetchone()
                    stats[f"{view.name}/{granularity}"] = TableStats(*(int(x) for x in found))
            if finer is not None:
                con.execute(f"DROP TABLE {finer[0]}")
            finer = (table, size)
        if finer is not None:
            con.execute(f"DROP TABLE {finer[0]}")
    return stats


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
    stats = duckdb_views(con)
    total = time.monotonic() - started
    con.execute("DROP TABLE events")
    return {
        "seconds": total,
        "dedup_seconds": dedup_s,
        "views_seconds": total - dedup_s,
        "events": distinct,
        "stats": stats,
    }
