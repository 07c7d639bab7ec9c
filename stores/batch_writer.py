"""Writing a computed view into its HBase table from the Spark tasks, and verifying it: the batch
layer's one way to put cells into a batch-view table (the row and column layout is stores/batch_layout)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from definitions.settings import Settings
from definitions.views import View
from stores import batch_layout as layout
from stores.clients import hbase_connection


class VerificationError(RuntimeError):
    """A written table does not hold what the computation produced."""


@dataclass(frozen=True)
class TableStats:
    rows: int = 0
    cells: int = 0
    checksum: int = 0

    def __add__(self, other: TableStats) -> TableStats:
        return TableStats(self.rows + other.rows, self.cells + other.cells, self.checksum + other.checksum)


def create_table(settings: Settings, name: str) -> None:
    conn = hbase_connection(settings)
    try:
        if name.encode() in conn.tables():
            conn.delete_table(name, disable=True)  # leftovers of a run that died under the same version
        conn.create_table(name, {"d": dict(max_versions=1)})
    finally:
        conn.close()


def missing_tables(settings: Settings, names: set[str]) -> list[str]:
    """Which of the tables `names` do not exist (retention dropped them, or they were never made)."""
    conn = hbase_connection(settings)
    try:
        present = {raw.decode() for raw in conn.tables()}
    finally:
        conn.close()
    return sorted(names - present)


def _write_partition(settings: Settings, table: str, view: View, granularity: str, rows) -> None:
    conn = hbase_connection(settings, timeout_s=60)
    try:
        with conn.table(table).batch(batch_size=settings.batch.put_batch_size) as batch:
            for row in rows:
                keys = [row[k] for k in view.keys]
                data = {layout.column(view, keys): layout.encode_int(row["value"])}
                if "sketch" in row and row["sketch"] is not None:
                    data[layout.SKETCH] = bytes(row["sketch"])
                batch.put(layout.row_key(view, granularity, keys, row["event_bucket"]), data)
    finally:
        conn.close()


def computed_stats(view: View, computed) -> TableStats:
    """The figures verification checks, from a computed view's frame (cache it first: it is read again)."""
    from pyspark.sql import functions as F

    agg = computed.agg(
        F.count(F.lit(1)).alias("cells"),
        F.sum("value").alias("checksum"),
        F.countDistinct("event_bucket").alias("buckets"),
    ).first()
    cells = int(agg["cells"])
    return TableStats(cells if view.layout == "by_key" else int(agg["buckets"]), cells, int(agg["checksum"] or 0))


def write_partitions(settings: Settings, table: str, view: View, granularity: str, computed) -> TableStats:
    """Write one granularity of a view; what was written (the figures verification checks)."""
    computed = computed.cache()
    try:
        stats = computed_stats(view, computed)
        computed.foreachPartition(functools.partial(_write_partition, settings, table, view, granularity))
        return stats
    finally:
        computed.unpersist()


def table_stats(settings: Settings, table: str, view: View) -> TableStats:
    """Count and sum what a table holds, by scanning it."""
    conn = hbase_connection(settings, timeout_s=120)
    rows = cells = checksum = 0
    try:
        columns = [layout.VALUE] if view.layout == "by_key" else [layout.FAMILY]
        for _, data in conn.table(table).scan(columns=columns, batch_size=5_000):
            rows += 1
            for name, value in data.items():
                if name != layout.SKETCH:
                    cells += 1
                    checksum += layout.decode_int(value)
    finally:
        conn.close()
    return TableStats(rows, cells, checksum)


def verify_table(settings: Settings, table: str, view: View, expected: TableStats) -> None:
    found = table_stats(settings, table, view)
    if found != expected:
        raise VerificationError(f"table {table} holds {found}, the computation produced {expected}")
