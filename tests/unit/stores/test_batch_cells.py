"""The bulk load's cells (stores/batch_cells, Spark SQL) are byte for byte the Thrift writer's
(stores/batch_layout), hostile keys and extreme values included (local Spark, no service)."""

from __future__ import annotations

import pytest

from definitions.views import PAGE_VIEWS, PAGE_VIEWS_BY_COUNTRY_DEVICE, TOP_PAGES, UNIQUE_VISITORS, View
from stores import batch_layout as layout
from stores.batch_cells import table_cells

HOSTILE = ["", "\x00", "a\x00b", "🦄/页面?é", "x" * 0xFFFF, "é" * 30_000, "/p"]
VALUES = [-(2**63), 2**63 - 1, 0, -1, 1, 255, -256]
BUCKETS = [0, 60, 1_795_795_200, 2**62]
INT_KEY = View(name="by_version", keys=("schema_version",), aggregation="count")


def expected_cells(view: View, granularity: str, rows: list[dict]) -> set[tuple[bytes, bytes, bytes]]:
    """What stores.batch_writer puts, as (row, qualifier within `d`, value)."""
    out = set()
    for row in rows:
        keys = [row[k] for k in view.keys]
        key = layout.row_key(view, granularity, keys, row["event_bucket"])
        out.add((key, layout.column(view, keys)[2:], layout.encode_int(row["value"])))
        if row.get("sketch") is not None:
            out.add((key, layout.SKETCH[2:], bytes(row["sketch"])))
    return out


def cells_of(spark, view: View, granularity: str, rows: list[dict], schema: str):
    computed = spark.createDataFrame([tuple(r.values()) for r in rows], schema)
    cells = [
        (bytes(c.row), bytes(c.qualifier), bytes(c.value)) for c in table_cells(view, granularity, computed).collect()
    ]
    assert len(cells) == len(set(cells)), "a cell twice"
    return set(cells)


def url_rows(with_sketch: bool = False) -> list[dict]:
    rows = []
    for i, (url, value) in enumerate(zip(HOSTILE, VALUES)):
        row = {"url": url, "event_bucket": BUCKETS[i % len(BUCKETS)], "value": value}
        if with_sketch:
            row["sketch"] = None if i == 2 else bytes([i, 0, 255]) * (i + 1)
        rows.append(row)
    return rows


@pytest.mark.parametrize("granularity", ["minute", "hour", "day"])
def test_by_key_cells_match_the_layout(spark, granularity):
    rows = url_rows()
    got = cells_of(spark, PAGE_VIEWS, granularity, rows, "url STRING, event_bucket BIGINT, value BIGINT")
    assert got == expected_cells(PAGE_VIEWS, granularity, rows)


def test_sketch_cells_only_where_a_sketch_is_set(spark):
    rows = url_rows(with_sketch=True)
    schema = "url STRING, event_bucket BIGINT, value BIGINT, sketch BINARY"
    got = cells_of(spark, UNIQUE_VISITORS, "hour", rows, schema)
    assert got == expected_cells(UNIQUE_VISITORS, "hour", rows)
    assert sum(1 for _, qualifier, _ in got if qualifier == b"s") == len(rows) - 1


def test_by_bucket_cells_match_the_layout(spark):
    rows = url_rows()
    got = cells_of(spark, TOP_PAGES, "day", rows, "url STRING, event_bucket BIGINT, value BIGINT")
    assert got == expected_cells(TOP_PAGES, "day", rows)


def test_two_key_parts(spark):
    rows = [
        {"country": a, "device": b, "event_bucket": 3_600, "value": v}
        for a, b, v in [("", "", 1), ("DE", "\x00", -5), ("🦄", "x" * 0xFFFF, 2**63 - 1), ("a", "b", 0)]
    ]
    view = PAGE_VIEWS_BY_COUNTRY_DEVICE
    got = cells_of(spark, view, "hour", rows, "country STRING, device STRING, event_bucket BIGINT, value BIGINT")
    assert got == expected_cells(view, "hour", rows)


def test_an_int_key_is_its_decimal_text(spark):
    rows = [{"schema_version": n, "event_bucket": 60, "value": 7} for n in (0, 1, -3, 2**31 - 1)]
    got = cells_of(spark, INT_KEY, "minute", rows, "schema_version INT, event_bucket BIGINT, value BIGINT")
    assert got == expected_cells(INT_KEY, "minute", rows)


def test_a_key_part_over_65535_bytes_fails_the_job(spark):
    rows = [{"url": "é" * 32_768, "event_bucket": 60, "value": 1}]  # 65,536 bytes
    with pytest.raises(ValueError):
        layout.row_key(PAGE_VIEWS, "minute", [rows[0]["url"]], 60)
    with pytest.raises(Exception, match="longer than 65535 bytes"):
        cells_of(spark, PAGE_VIEWS, "minute", rows, "url STRING, event_bucket BIGINT, value BIGINT")


def test_a_cell_without_a_value_fails_the_job(spark):
    """As the Thrift writer fails on it: an empty cell would pass for a value until verification."""
    rows = [{"url": "/a", "event_bucket": 60, "value": 1}, {"url": "/b", "event_bucket": 60, "value": None}]
    with pytest.raises(Exception, match="page_views/minute: a cell without a value"):
        cells_of(spark, PAGE_VIEWS, "minute", rows, "url STRING, event_bucket BIGINT, value BIGINT")
