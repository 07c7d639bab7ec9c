"""A batch read that stops part-way (a top-N refused for its size, a cell that is none) closes its
HBase scanner before its connection goes back to the pool: left to the exception's end, the
scanner was closed on the connection while another request used it (no service: the pool and the
table are stand-ins that record the order)."""

from __future__ import annotations

import contextlib

import pytest

from definitions.settings import Settings
from definitions.views import TOP_PAGES
from stores import batch_layout as layout
from stores.adapters import ReadTooLarge
from stores.batch_reader import BatchViewReader


def reader_of_scan(scan, settings: Settings | None = None) -> BatchViewReader:
    """A reader whose pool gives connections whose every table scans with `scan` (no service)."""

    class Pool:
        @contextlib.contextmanager
        def connection(self, timeout):
            yield type("Conn", (), {"table": lambda self, name: type("T", (), {"scan": staticmethod(scan)})()})()

    reader = BatchViewReader(settings or Settings(), pool_size=1, wait_s=1)
    reader._pool = Pool()
    return reader


def test_a_refused_read_closes_its_scanner_before_the_connection_is_returned():
    events: list[str] = []

    def scan(**kwargs):
        try:
            for n in range(100_000):
                yield b"row", {layout.column(TOP_PAGES, [f"/{n:06d}" + "x" * 500]): layout.encode_int(1)}
        finally:
            events.append("scanner closed")

    class Pool:
        @contextlib.contextmanager
        def connection(self, timeout):
            try:
                yield type("Conn", (), {"table": lambda self, name: type("T", (), {"scan": staticmethod(scan)})()})()
            finally:
                events.append("connection returned")

    reader = BatchViewReader(Settings(api={"max_read_mib": 1}), pool_size=1, wait_s=1)
    reader._pool = Pool()
    with pytest.raises(ReadTooLarge, match="top_pages"):
        reader.totals("t", TOP_PAGES, "hour", 0, 1)
    assert events == ["scanner closed", "connection returned"]


def test_a_series_read_refuses_a_sketch_larger_than_any_and_bounds_what_it_holds():
    """The series read held every row's value and sketch, unbounded: a damaged distinct view whose
    sketch cells are megabytes each came into memory a thousand rows at a time."""
    from definitions.views import UNIQUE_VISITORS
    from stores.batch_reader import MAX_SKETCH_BYTES, BatchViewsUnavailable

    asked: dict = {}

    def rows(sketch: bytes, n: int):
        def scan(**kwargs):
            asked.update(kwargs)
            for bucket in range(n):
                key = layout.row_key(UNIQUE_VISITORS, "hour", ["/"], bucket * 3600)
                yield key, {layout.VALUE: layout.encode_int(1), layout.SKETCH: sketch}

        return scan

    def reader_over(scan, mib: int = 64):
        reader = reader_of_scan(scan, Settings(api={"max_read_mib": mib}))
        return reader

    with pytest.raises(BatchViewsUnavailable) as refused:
        reader_over(rows(b"x" * (MAX_SKETCH_BYTES + 1), 3)).series("t", UNIQUE_VISITORS, "hour", ["/"], 0, 10**9)
    assert f"a sketch of {MAX_SKETCH_BYTES + 1} bytes" in refused.value.detail
    assert asked["batch_size"] <= 200 < 1_000, "rows of sketches are fetched fewer at a time"
    with pytest.raises(ReadTooLarge, match="unique_visitors"):
        reader_over(rows(b"x" * 4_000, 600), mib=2).series("t", UNIQUE_VISITORS, "hour", ["/"], 0, 10**9)
    got = reader_over(rows(b"s" * 4_000, 3)).series("t", UNIQUE_VISITORS, "hour", ["/"], 0, 10**9)
    assert got == {b * 3600: (1, b"s" * 4_000) for b in range(3)}


def test_a_top_read_of_many_cells_of_few_keys_is_bounded_too():
    """Only new keys counted: a minute-granularity window over months of the same URLs read every
    cell (10^8 over Thrift), holding a query slot and a connection for minutes."""
    from stores.batch_reader import READ_FACTOR

    def scan(**kwargs):
        for _ in range(10**9):  # as many buckets as the reader asks for
            yield b"row", {layout.column(TOP_PAGES, [f"/{n}"]): layout.encode_int(1) for n in range(100)}

    reader = reader_of_scan(scan, Settings(api={"max_read_mib": 1}))
    with pytest.raises(ReadTooLarge, match=r"top_pages: the window holds more than \d+ MiB of batch cells"):
        reader.totals("t", TOP_PAGES, "minute", 0, 1)
    assert READ_FACTOR >= 1


def test_a_negative_batch_cell_is_a_bad_cell_not_added_in():
    """No cell is negative (every number field of the event contract is): one written by a faulty
    older release was added into answers that said complete."""
    from definitions.views import PAGE_VIEWS
    from stores.batch_reader import BatchViewsUnavailable

    rows = {
        "series": (layout.row_key(PAGE_VIEWS, "hour", ["/"], 3600), {layout.VALUE: layout.encode_int(-4)}),
        "totals": (b"row", {layout.column(TOP_PAGES, ["/a"]): layout.encode_int(-4)}),
    }

    def reader_of(row):
        def scan(**kwargs):
            yield row

        reader = reader_of_scan(scan, Settings())
        return reader

    for read in (
        lambda: reader_of(rows["series"]).series("t", PAGE_VIEWS, "hour", ["/"], 0, 10**9),
        lambda: reader_of(rows["totals"]).totals("t", TOP_PAGES, "hour", 0, 10**9),
    ):
        with pytest.raises(BatchViewsUnavailable) as refused:
            read()
        assert "negative value -4" in refused.value.detail


def _round_trips(reader_call, view, worst_key: bytes) -> tuple[dict, int]:
    """What the reader's scan asks for, and the most bytes one Thrift round trip of it brings when
    every row (series) or column (top) holds the longest key the events limits allow and, in a
    distinct view, the largest sketch the platform writes."""
    from stores.batch_reader import MAX_SKETCH_BYTES

    asked: dict = {}

    def scan(**kwargs):
        asked.update(kwargs)
        return iter(())

    reader = reader_of_scan(scan, Settings())
    reader_call(reader)
    if "scan_batching" in asked:  # a top read: results of columns, a column per key
        return asked, asked["batch_size"] * asked["scan_batching"] * (len(worst_key) + 8)
    sketch = MAX_SKETCH_BYTES if view.aggregation == "distinct" else 0
    return asked, asked["batch_size"] * (len(worst_key) + 8 + sketch)


def test_every_api_scan_round_trip_is_bounded_in_bytes_for_the_longest_keys_the_limits_allow():
    """A top read asked for 10 results of 1,000 columns a round trip: with URLs of the 2,048
    characters (4 KB) the events limits allow, about 40 MB the Thrift server built whole; the API's
    16 connections (2 workers × 8) at once were 650 MB against its 256 MB heap. Each round trip now
    keeps within a share of a quarter of the heap, so all the API's connections at once do too."""
    from definitions.views import PAGE_VIEWS, UNIQUE_VISITORS

    settings = Settings()
    worst_key = b"k" * settings.events.worst_key_bytes()
    connections = settings.api.workers * settings.api.hbase_pool_size
    budget = settings.hbase.thrift_heap_mb * 2**20 // (4 * connections)
    reads = {
        "top": (TOP_PAGES, lambda r: r.totals("t", TOP_PAGES, "hour", 0, 1)),
        "series": (PAGE_VIEWS, lambda r: r.series("t", PAGE_VIEWS, "hour", ["/"], 0, 1)),
        "distinct": (UNIQUE_VISITORS, lambda r: r.series("t", UNIQUE_VISITORS, "hour", ["/"], 0, 1)),
    }
    for name, (view, call) in reads.items():
        asked, worst = _round_trips(call, view, worst_key)
        assert worst <= budget, f"{name}: {asked} brings up to {worst} bytes a round trip, over {budget}"
    asked, _ = _round_trips(reads["top"][1], TOP_PAGES, worst_key)
    assert asked["batch_size"] >= 10, "buckets of few keys still come several a round trip"
    asked, _ = _round_trips(reads["series"][1], PAGE_VIEWS, worst_key)
    assert asked["batch_size"] >= 500, "a plain series still comes hundreds of rows a round trip"


def test_a_sketch_larger_than_both_layers_build_is_a_bad_cell():
    """Both layers build HLL_8 sketches of HLL_LG_K registers (Spark's hll_sketch_agg, unions of
    them in the API); one of more registers is damage, refused by name."""
    from datasketches import hll_sketch, tgt_hll_type

    from definitions.views import HLL_LG_K, MAX_SKETCH_BYTES

    assert hll_sketch.get_max_updatable_serialization_bytes(HLL_LG_K, tgt_hll_type.HLL_8) <= MAX_SKETCH_BYTES
    assert hll_sketch.get_max_updatable_serialization_bytes(HLL_LG_K + 1, tgt_hll_type.HLL_8) > MAX_SKETCH_BYTES


def test_keys_are_counted_as_python_holds_them_four_bytes_a_character_beyond_the_bmp():
    """Budgets counted a key's characters: a URL of 1,000 emoji (4 KB, within the events limits) took
    4 KB in memory and counted 1 KB, so a read or a cache held about four times its setting."""
    from serving_layer.part_cache import approx_bytes
    from stores.adapters import ROW_BYTES

    emoji = "\U0001f600" * 1000
    keys = 2**20 // (ROW_BYTES + 2 * 1_030)  # as many as fit in 1 MiB were each key 1,030 bytes

    def scan(**kwargs):
        for n in range(keys):
            yield b"row", {layout.column(TOP_PAGES, [f"/{n:06d}" + emoji]): layout.encode_int(1)}

    reader = reader_of_scan(scan, Settings(api={"max_read_mib": 1}))
    with pytest.raises(ReadTooLarge, match="top_pages"):
        reader.totals("t", TOP_PAGES, "hour", 0, 1)
    assert approx_bytes(emoji) >= 4_000 and approx_bytes({emoji: 1}) >= 4_000, "the cache counts so too"
