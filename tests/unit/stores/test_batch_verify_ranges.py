"""Verifying a written batch table in row ranges: where the ranges are cut, that they cover every
row once, and that their figures add up to the table's (no service needed: the scan of one range is
replaced by a sorted in-memory table; tests/integration/batch/test_batch_job.py scans real HBase)."""

from __future__ import annotations

import bisect
import random

import pytest

from definitions.settings import get_settings
from definitions.views import PAGE_VIEWS, TOP_PAGES
from stores import batch_layout as layout
from stores import batch_writer
from stores.batch_writer import TableStats, Written, sample_row_keys, scan_ranges, split_points, table_stats


def in_range(key: bytes, start: bytes | None, stop: bytes | None) -> bool:
    return (start is None or key >= start) and (stop is None or key < stop)


def hostile_keys(rng: random.Random, n: int) -> list[bytes]:
    alphabet = [b"\x00", b"\xff", b"/", b"a", b"\x7f", b""]
    return [b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))) for _ in range(n)]


@pytest.mark.parametrize("seed", range(20))
def test_ranges_cover_every_key_exactly_once(seed):
    rng = random.Random(seed)
    keys = hostile_keys(rng, 300)
    splits = hostile_keys(rng, rng.randint(0, 12))  # unsorted, repeated, and empty keys among them
    ranges = scan_ranges(splits)
    for key in keys:
        if key:  # HBase has no empty row key
            assert sum(in_range(key, a, b) for a, b in ranges) == 1, (key, ranges)
    assert ranges[0][0] is None and ranges[-1][1] is None
    assert all(a is None or a != b"" for a, _ in ranges), "an empty start or stop reads as an open end"


def test_no_split_is_one_open_range():
    assert scan_ranges([]) == [(None, None)]
    assert scan_ranges([b""]) == [(None, None)]


def test_splits_follow_where_the_cells_are():
    """A granularity with 100 times the cells gets about 100 times the ranges, whatever its sample size."""
    minute = Written(TableStats(10_000, 10_000, 0), tuple(b"m%04d" % i for i in range(200)))
    day = Written(TableStats(100, 100, 0), tuple(b"d%04d" % i for i in range(200)))
    splits = split_points([minute, day], 16)
    assert splits == sorted(set(splits)) and 12 <= len(splits) <= 15
    assert sum(s.startswith(b"m") for s in splits) >= 14 * len(splits) // 16


def test_no_sample_or_one_range_gives_no_split():
    assert split_points([], 16) == []
    assert split_points([Written(TableStats())], 16) == []
    assert split_points([Written(TableStats(5, 5, 0), (b"a", b"b"))], 1) == []


def test_ranges_add_up_to_the_whole_table(monkeypatch):
    """table_stats over ranges, in threads, counts each row once (one range's scan replaced by a
    sorted in-memory table of 2,000 rows with two value columns each)."""
    rng = random.Random(7)
    rows = sorted({bytes(rng.randrange(256) for _ in range(rng.randint(1, 5))) for _ in range(2_000)})
    values = {key: (rng.randrange(-1000, 1000), rng.randrange(1000)) for key in rows}

    def scan(settings, table, view, start, stop):
        lo = 0 if start is None else bisect.bisect_left(rows, start)
        hi = len(rows) if stop is None else bisect.bisect_left(rows, stop)
        picked = rows[lo:hi]
        return TableStats(len(picked), 2 * len(picked), sum(sum(values[k]) for k in picked))

    monkeypatch.setattr(batch_writer, "_range_stats", scan)
    whole = TableStats(len(rows), 2 * len(rows), sum(sum(v) for v in values.values()))
    settings = get_settings()
    for splits in ([], rng.sample(rows, 15), rng.sample(rows, 1) * 3, [b"\x00", b"\xff" * 6]):
        assert table_stats(settings, "t", PAGE_VIEWS, splits) == whole, splits


@pytest.mark.parametrize("view", [PAGE_VIEWS, TOP_PAGES], ids=lambda v: v.layout)
def test_sampled_row_keys_are_row_keys_of_the_computed_frame(spark, view):
    rows = [(f"/p{i % 37}", 60 * (i % 50), i) for i in range(3_000)]
    computed = spark.createDataFrame(rows, "url STRING, event_bucket LONG, value LONG").dropDuplicates(
        ["url", "event_bucket"]
    )
    computed = computed.cache()
    stats = batch_writer.computed_stats(view, computed)
    every = {layout.row_key(view, "minute", [r["url"]], r["event_bucket"]) for r in computed.collect()}
    sample = sample_row_keys(view, "minute", computed, stats, size=64)
    assert sample and set(sample) <= every
    assert len(sample) <= 4 * 64
    assert sample_row_keys(view, "minute", computed.limit(0), TableStats()) == []
    computed.unpersist()


def test_a_failing_range_fails_the_scan_without_waiting_for_the_others(monkeypatch):
    import threading

    release, finished = threading.Event(), []

    def scan(settings, table, view, start, stop):
        if start is None:
            raise ConnectionError("thrift server gone")
        release.wait(30)
        finished.append(start)
        return TableStats()

    monkeypatch.setattr(batch_writer, "_range_stats", scan)
    try:
        with pytest.raises(ConnectionError, match="thrift server gone"):
            table_stats(get_settings(), "t", PAGE_VIEWS, [b"b", b"c", b"d"])
        assert finished == [], "the failure was reported only after the other ranges ended"
    finally:
        release.set()


@pytest.mark.parametrize(
    "recorded",
    [None, "0a0b", {"page_views": "0a0b"}, {"page_views": [1, 2]}, {"page_views": ["zz"]}, {"page_views": None}],
)
def test_malformed_recorded_cuts_fail_verification_clearly(recorded):
    from batch_layer.job import _recorded_splits
    from stores.batch_writer import VerificationError

    with pytest.raises(VerificationError, match="run 7: its recorded verification cuts for page_views are malformed"):
        _recorded_splits(7, "page_views", recorded)


def test_recorded_cuts_read_back():
    from batch_layer.job import _recorded_splits

    assert _recorded_splits(7, "page_views", {"page_views": ["00ff", "61"]}) == [b"\x00\xff", b"a"]
    assert _recorded_splits(7, "page_views", {}) == [], "a run of an earlier release: one scan"


def test_long_sampled_keys_are_not_cuts():
    keys = tuple(bytes([i]) * (300 if i % 2 else 10) for i in range(1, 100))
    splits = split_points([Written(TableStats(99, 99, 0), keys)], 16)
    assert splits and all(len(s) <= batch_writer.SPLIT_KEY_MAX_BYTES for s in splits)


@pytest.mark.parametrize("url_chars", [512, 2_048, 4_000])
def test_a_verify_round_trip_of_wide_rows_is_bounded_in_bytes_by_the_longest_key(monkeypatch, url_chars):
    """A by_bucket row has a column per key (every URL of a day): 50 results of 1,000 columns were asked
    per round trip, about 200 MB with 4 KB keys, which the Thrift server (256 MB heap) held at once. The
    results asked per round trip follow the longest key the events limits allow."""
    from definitions.layer_settings import EventLimits
    from definitions.settings import Settings

    asked: dict = {}

    class Table:
        def scan(self, **kwargs):
            asked.update(kwargs)
            return iter(())

    class Connection:
        def table(self, name):
            return Table()

        def close(self):
            pass

    monkeypatch.setattr(batch_writer, "hbase_connection", lambda _settings, timeout_s=10: Connection())
    limits = EventLimits(max_url_chars=url_chars, max_record_bytes=64_000 if url_chars > 2_048 else 4_096)
    settings = Settings(events=limits)
    batch_writer._range_stats(settings, "t", TOP_PAGES, None, None)
    worst = limits.worst_key_bytes()
    assert asked["scan_batching"] * asked["batch_size"] * worst <= batch_writer.ROUND_TRIP_BYTES
    assert asked["batch_size"] >= 1


def test_narrow_rows_still_come_fifty_to_a_round_trip():
    """Bounding a round trip in bytes takes columns from each result, not results: most by_bucket rows
    (minute buckets) are narrow, and 4 results a round trip made their scan 12 times the round trips."""
    from definitions.settings import Settings

    columns, results = batch_writer.wide_scan_sizes(Settings())
    assert results == batch_writer.WIDE_ROWS_AT_ONCE and columns >= 50
