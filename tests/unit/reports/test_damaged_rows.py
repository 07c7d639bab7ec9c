"""Realtime rows the speed layer cannot have written (a key that is no JSON array of strings, a null
or negative value, a distinct row whose sketch is no sketch): one such row made every report fail
(json.loads on its key, BadSketch), and with it the DAG's realtime clean-up after the report. They
are now left out and named, as the serving layer refuses them. A key spelled otherwise than
key_text writes it is the same cell, as the serving layer reads it.

And a report that compared less than its window (ingest buckets whose realtime rows expired or
were cleaned up) does not say every difference is explained."""

from __future__ import annotations

from collections import namedtuple
from dataclasses import replace

import pytest

from definitions.views import PAGE_VIEWS, TOP_PAGES, UNIQUE_VISITORS, key_text
from reports import read
from reports.build import assemble
from stores.realtime_schema import BY_BUCKET, BY_KEY
from tests.unit.reports.conftest import T0, comparison


def two_visitors() -> bytes:
    from datasketches import hll_sketch, tgt_hll_type

    from definitions.views import HLL_LG_K

    sketch = hll_sketch(HLL_LG_K, tgt_hll_type.HLL_8)
    for visitor in ("u1", "u2"):
        sketch.update(visitor)
    return bytes(sketch.serialize_compact())


Row = namedtuple("Row", "view_name granularity key event_bucket ingest_bucket value sketch")


@pytest.fixture
def rows(monkeypatch):
    found: list[tuple[str, Row]] = []
    monkeypatch.setattr("stores.realtime_scan.rows_ingested_between", lambda *a, **k: iter(found))
    monkeypatch.setattr("stores.replays.read_overlays", lambda settings: {})
    monkeypatch.setattr("stores.realtime_schema.read_ttl_changes", lambda settings: ())
    monkeypatch.setattr("stores.checkpoints.read_marker", lambda settings: None)
    return found


def test_damaged_rows_are_left_out_and_named_and_odd_spellings_are_the_same_cell(settings, rows):
    good = (BY_KEY, Row("page_views", "minute", key_text(["/a"]), T0, T0, 3, None))
    rows += [
        good,
        (BY_KEY, Row("page_views", "minute", "not json", T0, T0, 3, None)),
        (BY_KEY, Row("page_views", "minute", "[" * 5000, T0, T0, 3, None)),
        (BY_KEY, Row("page_views", "minute", key_text(["/b"]), T0, T0, None, None)),
        (BY_KEY, Row("page_views", "minute", key_text(["/c"]), T0, T0, -4, None)),
        (BY_KEY, Row("unique_visitors", "minute", key_text(["/a"]), T0, T0, 1, b"\x00not a sketch")),
        (BY_KEY, Row("unique_visitors", "minute", key_text(["/b"]), T0, T0, 1, None)),
        (BY_BUCKET, Row("top_pages", "minute", '[ "/x" ]', T0, T0, 5, None)),
    ]
    snapshot = read.read_realtime(settings, T0 * 1000, (T0 + 60) * 1000, [PAGE_VIEWS, UNIQUE_VISITORS, TOP_PAGES])
    assert snapshot.cells == {
        ("page_views", "minute", key_text(["/a"]), T0, T0): 3.0,
        ("top_pages", "minute", key_text(["/x"]), T0, T0): 5.0,
    }
    assert snapshot.rows == 2 and snapshot.damaged_rows == 6
    assert len(snapshot.damaged) == 6 and any("negative" in d for d in snapshot.damaged)
    report = assemble(settings, replace(comparison(settings), realtime=snapshot), 7, "run")
    assert not report["ok"]
    assert report["problems"][0].startswith("6 realtime row(s) the speed layer cannot have written were left out")
    assert report["inputs"]["realtime_damaged_rows"] == 6


def test_a_sketch_of_a_distinct_row_is_read_for_its_estimate(settings, rows):
    rows.append((BY_KEY, Row("unique_visitors", "minute", key_text(["/a"]), T0, T0, 2, two_visitors())))
    snapshot = read.read_realtime(settings, T0 * 1000, None, [UNIQUE_VISITORS])
    assert snapshot.cells[("unique_visitors", "minute", key_text(["/a"]), T0, T0)] == pytest.approx(2.0)


def test_a_report_that_skipped_ingest_buckets_does_not_say_all_is_explained(settings):
    compared = comparison(settings)
    report = assemble(settings, replace(compared, skipped={"expired_ingest_buckets": 3}), 7, "run")
    assert not report["ok"]
    assert any(p.startswith("part of the window was not compared: 3 ingest bucket(s)") for p in report["problems"])
    assert assemble(settings, compared, 7, "run")["ok"]
