"""Writing a computed view into its HBase table from the Spark tasks, and verifying it: the batch
layer's one way to put cells into a batch-view table (the row and column layout is stores/batch_layout)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass

from definitions.executor_settings import executor_settings
from definitions.python_workers import skip_unchanged_zip_rereads
from definitions.settings import Settings
from definitions.spark import cached
from definitions.views import View
from stores import batch_layout as layout
from stores.clients import closed_after, hbase_connection


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
    """Create a run's table; RuntimeError, and nothing changed, when one of that name exists: each
    run's version is new (the meta table's counter), so that table is another run's, maybe served."""
    conn = hbase_connection(settings)
    try:
        if name.encode() in conn.tables():
            raise RuntimeError(
                f"HBase table {name} exists already, though its version was just allocated: the meta table's "
                f"version counter is behind the tables (the meta table restored from a backup?), or another meta "
                f"table's runs share namespace {settings.hbase.namespace}. Nothing was deleted; move "
                "the counter past the highest version of the namespace's tables, or give each meta table its own "
                "namespace"
            )
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


# The puts of one call to HBase: batch.put_batch_size of them, and fewer when they hold more bytes
# than this (long keys, sketches), so one call never takes tens of megabytes.
PUT_BATCH_BYTES = 4 * 1024 * 1024


def _write_partition(settings: Settings, table: str, view: View, granularity: str, rows) -> None:
    skip_unchanged_zip_rereads()
    conn = hbase_connection(settings, timeout_s=60)
    try:
        with conn.table(table).batch(batch_size=settings.batch.put_batch_size) as batch:
            held = 0  # bytes put since the last send this loop made (happybase sends by count too)
            for row in rows:
                keys = [row[k] for k in view.keys]
                data = {layout.column(view, keys): layout.encode_int(row["value"])}
                if "sketch" in row and row["sketch"] is not None:
                    data[layout.SKETCH] = bytes(row["sketch"])
                key = layout.row_key(view, granularity, keys, row["event_bucket"])
                batch.put(key, data)
                held += len(key) + sum(len(c) + len(v) for c, v in data.items())
                if held >= PUT_BATCH_BYTES:
                    batch.send()
                    held = 0
    finally:
        conn.close()


@dataclass(frozen=True)
class Written:
    """What one granularity's write produced: the figures verification checks, and a sample of the
    row keys written (where the table's verification scan splits into ranges)."""

    stats: TableStats
    row_sample: tuple[bytes, ...] = ()


# Row keys sampled per written granularity: enough to split a table into even ranges.
ROW_SAMPLE = 256


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


def sample_row_keys(view: View, granularity: str, computed, stats: TableStats, size: int = ROW_SAMPLE) -> list[bytes]:
    """About `size` row keys of a computed granularity, drawn at random (the frame is read again:
    cache it first)."""
    if stats.cells == 0:
        return []
    fraction = min(1.0, 2.0 * size / stats.cells)
    picked = computed.select(*view.keys, "event_bucket").sample(fraction=fraction, seed=17).limit(4 * size)
    return [layout.row_key(view, granularity, [r[k] for k in view.keys], r["event_bucket"]) for r in picked.collect()]


def write_partitions(settings: Settings, table: str, view: View, granularity: str, computed) -> Written:
    """Write one granularity of a view; what was written (the figures verification checks)."""
    with cached(computed) as computed:
        stats = computed_stats(view, computed)
        sample = sample_row_keys(view, granularity, computed, stats)
        computed.foreachPartition(partition_writer(settings, table, view, granularity))
        return Written(stats, tuple(sample))


def partition_writer(settings: Settings, table: str, view: View, granularity: str) -> Callable[..., None]:
    """What each task runs in its executor's Python worker: write its partition of one granularity.
    It carries the settings without the secrets no executor uses (definitions.executor_settings)."""
    return functools.partial(_write_partition, executor_settings(settings), table, view, granularity)


# Sampled row keys longer than this are not used as cuts (the run record keeps the cuts).
SPLIT_KEY_MAX_BYTES = 256


def split_points(written: Sequence[Written], ranges: int) -> list[bytes]:
    """Up to `ranges - 1` distinct row keys, sorted, that cut a table into ranges of about as many
    cells each: each granularity's sampled keys stand for its share of the cells. Each is a row the
    computation wrote (verification checks they are all there)."""
    weighted: dict[bytes, float] = {}
    for part in written:
        for key in part.row_sample:
            weighted[key] = weighted.get(key, 0.0) + part.stats.cells / len(part.row_sample)
    if ranges < 2 or not weighted:
        return []
    total, seen = sum(weighted.values()), 0.0
    picked: list[bytes] = []
    for key in sorted(weighted):
        due = seen >= total * (len(picked) + 1) / ranges and len(picked) < ranges - 1
        if due and len(key) <= SPLIT_KEY_MAX_BYTES:
            picked.append(key)
        seen += weighted[key]
    return picked


# A table is verified in this many row ranges per scanning thread, so that a thread that finishes a
# short range takes the next one.
RANGES_PER_THREAD = 4


def table_splits(settings: Settings, written: Sequence[Written]) -> list[bytes]:
    """Where the verification of a table written in `written` splits its scan."""
    return split_points(written, RANGES_PER_THREAD * settings.batch.verify_threads)


def scan_ranges(splits: Sequence[bytes]) -> list[tuple[bytes | None, bytes | None]]:
    """[start, stop) row ranges that cover every row once: before the first split, between two, after
    the last (None: open; an empty key is no split, as HBase reads it as "open")."""
    edges: list[bytes | None] = [None, *sorted({s for s in splits if s}), None]
    return list(zip(edges[:-1], edges[1:], strict=True))


# A by_bucket table's rows have a column per key the bucket saw (every URL of a day, say): their
# scans ask for at most this many columns per result, and at most WIDE_ROWS_AT_ONCE results per round
# trip, fewer when the longest key the events limits allow would make a round trip hold more than
# ROUND_TRIP_BYTES: neither the Thrift server (its heap: hbase.thrift_heap_mb) nor this process holds a
# whole wide row, or many of them.
COLUMNS_AT_ONCE = 1_000
WIDE_ROWS_AT_ONCE = 50
ROUND_TRIP_BYTES = 16 * 1024 * 1024
CELL_OVERHEAD_BYTES = 64  # a column's family, its 8-byte value, the row key's share, Thrift framing


def wide_scan_sizes(settings: Settings) -> tuple[int, int]:
    """(columns per result, results per round trip) of a wide row's scan: COLUMNS_AT_ONCE and
    WIDE_ROWS_AT_ONCE at most; fewer columns per result as the longest key the events limits allow
    grows (so narrow rows, most of them, still come 50 to a round trip), and fewer results only when
    one column per result is too much already."""
    column_bytes = settings.events.worst_key_bytes() + CELL_OVERHEAD_BYTES
    columns = max(1, min(COLUMNS_AT_ONCE, ROUND_TRIP_BYTES // (WIDE_ROWS_AT_ONCE * column_bytes)))
    return columns, max(1, min(WIDE_ROWS_AT_ONCE, ROUND_TRIP_BYTES // (columns * column_bytes)))


def _range_stats(settings: Settings, table: str, view: View, start: bytes | None, stop: bytes | None) -> TableStats:
    conn = hbase_connection(settings, timeout_s=120)
    rows = cells = checksum = 0
    try:
        if view.layout == "by_key":
            scan = conn.table(table).scan(row_start=start, row_stop=stop, columns=[layout.VALUE], batch_size=5_000)
        else:  # a row per bucket, a column per key: parts of a row at a time, however many keys it holds
            columns, results = wide_scan_sizes(settings)
            scan = conn.table(table).scan(
                row_start=start, row_stop=stop, columns=[layout.FAMILY], batch_size=results, scan_batching=columns
            )
        last = None
        with closed_after(scan):  # closed before the connection, also when a cell is no count
            for key, data in scan:
                if key != last:  # a wide row comes in several parts, one after another
                    rows += 1
                    last = key
                for name, value in data.items():
                    if name != layout.SKETCH:
                        cells += 1
                        checksum += layout.decode_int(value)
    finally:
        conn.close()
    return TableStats(rows, cells, checksum)


# Counts one [start, stop) row range of a table (None: open): rows, cells other than a sketch, their sum.
RangeCounter = Callable[[bytes | None, bytes | None], TableStats]


def table_stats(
    settings: Settings, table: str, view: View, splits: Sequence[bytes] = (), count_range: RangeCounter | None = None
) -> TableStats:
    """Count and sum what a table holds, by scanning it: one range per gap between `splits`, up to
    `batch.verify_threads` of them at once, each counted by `count_range` (by default a scan through
    its own Thrift connection; stores.batch_bulk_load.range_counter reads the region servers from
    the run's driver)."""
    if count_range is None:
        count_range = functools.partial(_range_stats, settings, table, view)
    ranges = scan_ranges(splits)
    if len(ranges) == 1:
        return count_range(None, None)
    pool = ThreadPoolExecutor(max_workers=min(len(ranges), settings.batch.verify_threads))
    futures = [pool.submit(count_range, start, stop) for start, stop in ranges]
    try:
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failure = next((e for e in (f.exception() for f in done) if e is not None), None)
        if failure is not None:
            raise failure  # at once, not after the ranges still being scanned
        return sum((f.result() for f in futures), TableStats())
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # ranges not started yet are not scanned


def missing_rows(settings: Settings, table: str, keys: Sequence[bytes]) -> list[bytes]:
    """Which of the row keys `keys` the table does not hold."""
    wanted = sorted({k for k in keys if k})
    if not wanted:
        return []
    conn = hbase_connection(settings, timeout_s=120)
    try:
        handle = conn.table(table)
        # Each row's first cell only: a by_bucket row may hold a column per key of its bucket.
        present = {
            key
            for wanted_key in wanted
            for key, _ in handle.scan(
                row_start=wanted_key, row_stop=wanted_key + b"\x00", filter=b"FirstKeyOnlyFilter()", limit=1
            )
        }
    finally:
        conn.close()
    return [k for k in wanted if k not in present]


def verify_table(
    settings: Settings,
    table: str,
    view: View,
    expected: TableStats,
    splits: Sequence[bytes] = (),
    count_range: RangeCounter | None = None,
) -> None:
    """VerificationError unless the table holds the rows, cells and checksum the computation
    produced, and the rows at `splits` (row keys sampled from the computation, as
    stores/batch_layout encodes them: a write that encoded keys otherwise fails here)."""
    found = table_stats(settings, table, view, splits, count_range)
    if found != expected:
        raise VerificationError(f"table {table} holds {found}, the computation produced {expected}")
    missing = missing_rows(settings, table, splits)
    if missing:
        raise VerificationError(
            f"table {table} lacks {len(missing)} of the {len(splits)} row keys sampled from the computation "
            f"(first: {missing[0].hex()})"
        )
