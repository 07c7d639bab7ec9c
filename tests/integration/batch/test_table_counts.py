"""A bulk run counts its tables for verification from the driver's JVM
(stores.batch_bulk_load.range_counter, stores/jvm/HBaseTableStats.java): on the real HBase, every
range gives the rows, cells and sum the Thrift scan gives, and what the table holds."""

from __future__ import annotations

import struct

import pytest
from py4j.protocol import Py4JJavaError

from definitions.views import PAGE_VIEWS, TOP_PAGES
from stores import batch_writer
from stores.batch_bulk_load import chosen_load, range_counter
from stores.batch_writer import TableStats, create_table, scan_ranges, table_stats
from stores.clients import hbase_connection

LONG_MAX = 2**63 - 1


def count(value: int) -> bytes:
    return struct.pack(">q", value)


# Row -> cells. Values near a long's limits: their sum leaves a long's range, twice, both ways.
BY_KEY = {
    b"\x00\x02/a\x00\x00": {b"d:v": count(5), b"d:s": b"\x02\x01\x07sketch"},
    b"\x00\x02/b": {b"d:v": count(-7)},
    b"\x00\x02/c": {b"d:v": count(LONG_MAX), b"d:s": b"\x00"},
    b"\x00\x02/d": {b"d:v": count(LONG_MAX)},
    b"\x00\x02/e": {b"d:v": count(-(2**63))},
    b"\xff\xfe": {b"d:v": count(LONG_MAX)},
}
BY_BUCKET = {
    b"\x00\x00\x00\x01": {b"d:/a": count(3), b"d:/b": count(4), b"d:s": b"not a count"},
    b"\x00\x00\x00\x02": {b"d:/a": count(LONG_MAX), b"d:/\xc3\xa9": count(LONG_MAX)},
    b"\x00\x00\x00\x03": {b"d:/b": count(-1)},
}


# A by_bucket row with a column per key of a busy bucket: scanned in parts (2,500 columns, parts of
# 1,000), still one row; whole, a few such rows of long URLs held gigabytes in the Thrift server.
WIDE = {
    b"\x00\x00\x00\x01": {b"d:/" + str(n).encode() * 4: count(n) for n in range(2_500)},
    b"\x00\x00\x00\x02": {b"d:/a": count(1)},
    b"\x00\x00\x00\x03": {**{b"d:/" + str(n).encode(): count(-n) for n in range(1_001)}, b"d:s": b"sketch"},
}


def expected(rows: dict[bytes, dict[bytes, bytes]]) -> TableStats:
    values = [struct.unpack(">q", v)[0] for cells in rows.values() for k, v in cells.items() if k != b"d:s"]
    return TableStats(len(rows), len(values), sum(values))


@pytest.fixture
def bulk(settings, spark):
    if chosen_load(settings) != "bulk":
        pytest.skip("the batch load here is puts: the session has no HBase client")
    return spark


@pytest.fixture
def filled(settings, stack, unique):
    made = []

    def fill(rows: dict[bytes, dict[bytes, bytes]]) -> str:
        name = f"count_probe_{unique}_{len(made)}"
        create_table(settings, name)
        made.append(name)
        conn = hbase_connection(settings)
        try:
            table = conn.table(name)
            for row, cells in rows.items():
                table.put(row, cells)
        finally:
            conn.close()
        return name

    yield fill
    conn = hbase_connection(settings)
    try:
        for name in made:
            conn.delete_table(name, disable=True)
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("view", "rows"),
    [(PAGE_VIEWS, BY_KEY), (TOP_PAGES, BY_BUCKET), (TOP_PAGES, WIDE)],
    ids=["by_key", "by_bucket", "wide_rows"],
)
def test_the_jvm_counts_every_range_as_the_thrift_scan(settings, bulk, filled, view, rows):
    name = filled(rows)
    counter = range_counter(settings, bulk, name, view)
    keys = sorted(rows)
    for splits in ([], keys[1:3], keys, [b"\x00\x02/bb", b"\xff"], [b"\xff\xff\xff"]):
        for start, stop in scan_ranges(splits):
            assert counter(start, stop) == batch_writer._range_stats(settings, name, view, start, stop), (start, stop)
        assert table_stats(settings, name, view, splits, counter) == expected(rows), splits
    assert rows is WIDE or expected(rows).checksum > LONG_MAX, "the sum leaves a long's range"


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")  # its scanner closed in time
def test_a_cell_that_is_no_count_fails_both(settings, bulk, filled):
    name = filled({**BY_KEY, b"\x00\x02/x": {b"d:v": b"abc"}})
    with pytest.raises(Py4JJavaError, match="holds 3 bytes, not an 8-byte count"):
        range_counter(settings, bulk, name, PAGE_VIEWS)(None, None)
    with pytest.raises(struct.error):
        batch_writer._range_stats(settings, name, PAGE_VIEWS, None, None)


def test_wide_rows_are_counted_once_by_the_thrift_scan_and_found_by_their_first_cell(
    settings, stack, filled, monkeypatch
):
    import happybase

    asked: list[dict] = []
    real_scan = happybase.Table.scan
    monkeypatch.setattr(happybase.Table, "scan", lambda self, **kw: asked.append(kw) or real_scan(self, **kw))
    name = filled(WIDE)
    conn = hbase_connection(settings)
    try:  # HBase gives such rows in parts of COLUMNS_AT_ONCE columns: 3 + 1 + 2 results for 3 rows
        parts = list(conn.table(name).scan(batch_size=10, scan_batching=batch_writer.COLUMNS_AT_ONCE))
    finally:
        conn.close()
    first, single, second = sorted(WIDE)
    assert [key for key, _ in parts] == [first] * 3 + [single] + [second] * 2
    asked.clear()
    assert batch_writer._range_stats(settings, name, TOP_PAGES, None, None) == expected(WIDE)
    columns, results = batch_writer.wide_scan_sizes(settings)  # bounded in bytes by the longest key allowed
    assert (asked[0]["scan_batching"], asked[0]["batch_size"]) == (columns, results)
    assert columns < max(len(cells) for cells in WIDE.values()), "read in parts, never a whole wide row"
    keys = sorted(WIDE)
    asked.clear()
    assert batch_writer.missing_rows(settings, name, [*keys, b"\x00\x00\x00\x09"]) == [b"\x00\x00\x00\x09"]
    assert asked and all(kw["filter"] == b"FirstKeyOnlyFilter()" for kw in asked), "each row's first cell only"


def test_a_top_n_over_more_batch_keys_than_a_read_may_hold_is_refused_on_the_real_hbase(settings, stack, filled):
    """The batch part of a top-N sums every key of its buckets (a day row holds a column per URL of
    the day): a read of them is bounded by api.max_read_mib like the realtime part's, and read from
    HBase in parts of rows."""
    from stores import batch_layout as layout
    from stores.adapters import ReadTooLarge
    from stores.batch_reader import BatchViewReader

    urls = [f"/{n:05d}" + "x" * 300 for n in range(2_500)]
    bucket = 1_800_000_000 // 3600
    name = filled(
        {
            layout.row_key(TOP_PAGES, "hour", (), bucket): {
                layout.column(TOP_PAGES, [u]): count(n + 1) for n, u in enumerate(urls)
            },
            layout.row_key(TOP_PAGES, "hour", (), bucket + 1): {layout.column(TOP_PAGES, [urls[0]]): count(5)},
        }
    )
    roomy = BatchViewReader(settings, pool_size=1, wait_s=5)
    totals = roomy.totals(name, TOP_PAGES, "hour", bucket, bucket + 1)
    assert len(totals) == 2_500 and sum(totals.values()) == 2_500 * 2_501 // 2 + 5
    tight = settings.model_copy(update={"api": settings.api.model_copy(update={"max_read_mib": 1})})
    with pytest.raises(ReadTooLarge, match=r"top_pages: the window holds more than 1 MiB of batch keys"):
        BatchViewReader(tight, pool_size=1, wait_s=5).totals(name, TOP_PAGES, "hour", bucket, bucket + 1)
