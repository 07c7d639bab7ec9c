"""Matching the two sides of a window, the tolerance of a sketch and the figures (no service)."""

from __future__ import annotations

import pytest

from definitions.views import PAGE_VIEWS, UNIQUE_VISITORS
from reports.cells import HLL_BOUND, SKETCH_TOLERANCE, BatchCell, significant, tolerance
from reports.compare import granularity_figures, match_cells, view_report, view_summary
from tests.unit.reports.conftest import HOSTILE, T0, cell_id

MINUTE = 60


def test_the_tolerance_of_a_sketch_is_three_bounds_and_at_least_half_a_value():
    assert HLL_BOUND == pytest.approx(0.01625)
    assert tolerance(1000) == pytest.approx(SKETCH_TOLERANCE * HLL_BOUND * 1000) == pytest.approx(48.75)
    assert tolerance(0) == tolerance(5) == 0.5, "small cells: the estimate must round to the exact count"
    assert significant(0.001, additive=True) and not significant(0, additive=True)
    assert not significant(0.49, additive=False) and significant(0.5, additive=False)


def window(buckets: int = 10) -> tuple[int, int]:
    return T0 * 1000, (T0 + buckets * MINUTE) * 1000


def test_cells_are_matched_within_the_window_and_above_the_ttl_floor():
    inside = cell_id("page_views", "minute", ["/a"], T0 + MINUTE)
    before = cell_id("page_views", "minute", ["/a"], T0 - MINUTE)
    after = cell_id("page_views", "minute", ["/a"], T0 + 10 * MINUTE)
    expired = cell_id("page_views", "minute", ["/b"], T0)
    speed_only = cell_id("page_views", "minute", ["/c"], T0 + 2 * MINUTE)
    dropped_only = cell_id("page_views", "minute", ["/d"], T0 + 3 * MINUTE)
    other_granularity = cell_id("page_views_by_country_device", "minute", ["DE", "mobile"], T0)
    batch = {
        inside: BatchCell(5, 5, 5),
        before: BatchCell(1, 1, 1),
        after: BatchCell(1, 1, 1),
        expired: BatchCell(1, 1, 1),
        dropped_only: BatchCell(dropped=3),  # copies both layers drop: no cell on either side
    }
    realtime = {inside: 5.0, speed_only: 2.0, other_granularity: 1.0}
    cells, skipped = match_cells([PAGE_VIEWS], realtime, batch, *window(), ttl_floor_s=T0 + 1)
    assert skipped == {"expired_ingest_buckets": 1, "cleaned_ingest_buckets": 0, "unmaintained_ingest_buckets": 0}
    got = {(c.key, c.ingest_bucket): c for c in cells["page_views"]}
    assert set(got) == {('["/a"]', T0 + MINUTE), ('["/c"]', T0 + 2 * MINUTE)}
    a, c = got[('["/a"]', T0 + MINUTE)], got[('["/c"]', T0 + 2 * MINUTE)]
    assert a.diff == 0 and a.parts == {} and a.speed_present and a.batch_present
    assert c.diff == 2 and c.parts == {"accepted_by_one_layer": 2} and not c.batch_present


def test_cells_of_a_view_the_realtime_clean_up_deleted_are_left_out_not_blamed():
    """After the clean-up deleted a view's rows below its cutoff, its batch cells there had no speed
    side: each read as counted by one layer only, and the report was not ok."""
    from definitions.views import TOP_PAGES
    from reports.build import NoWindow, check_not_cleaned

    cleaned = cell_id("page_views", "minute", ["/a"], T0 + MINUTE)
    kept = cell_id("page_views", "minute", ["/a"], T0 + 5 * MINUTE)
    other = cell_id("top_pages", "minute", ["/a"], T0 + MINUTE)
    batch = {cleaned: BatchCell(5, 5, 5), kept: BatchCell(2, 2, 2), other: BatchCell(1, 1, 1)}
    cleaned_s = {"page_views": T0 + 5 * MINUTE, "top_pages": T0}
    cells, skipped = match_cells([PAGE_VIEWS, TOP_PAGES], {kept: 2.0, other: 1.0}, batch, *window(), 0, cleaned_s)
    assert skipped["cleaned_ingest_buckets"] == 1
    assert [(c.ingest_bucket, c.diff) for c in cells["page_views"]] == [(T0 + 5 * MINUTE, 0)]
    assert [(c.ingest_bucket, c.diff) for c in cells["top_pages"]] == [(T0 + MINUTE, 0)]
    start_ms, end_ms = window()
    check_not_cleaned([PAGE_VIEWS, TOP_PAGES], cleaned_s, start_ms, end_ms)  # top_pages' rows are all there
    everything = dict.fromkeys(["page_views", "top_pages"], end_ms // 1000)
    with pytest.raises(NoWindow, match="realtime clean-up was started on the rows"):
        check_not_cleaned([PAGE_VIEWS, TOP_PAGES], everything, start_ms, end_ms)
    # A full recomputation at the unchanged cutoff: an empty window, reported (empty) as before.
    check_not_cleaned([PAGE_VIEWS, TOP_PAGES], everything, end_ms, end_ms)


def test_figures_of_a_view_count_exact_cells_drift_and_causes():
    cells_ids = [cell_id("page_views", "minute", [f"/p{i}"], T0 + i * MINUTE) for i in range(4)]
    batch = {cid: BatchCell(10, 10, 10) for cid in cells_ids}
    batch[cells_ids[0]] = BatchCell(10, 12, 10, recounts=2)  # re-sent beyond the window: the speed layer counts 12
    batch[cells_ids[1]] = BatchCell(10, 10, 10, late_records=3)
    realtime = {cid: 10.0 for cid in cells_ids}
    realtime[cells_ids[0]] = 12.0
    realtime[cells_ids[1]] = 9.0  # one short in a cell holding late events
    cells, _ = match_cells([PAGE_VIEWS], realtime, batch, *window(), ttl_floor_s=0)
    f = granularity_figures(PAGE_VIEWS, cells["page_views"])
    assert f["cells"] == 4 and f["exact_cells"] == 2 and f["exact_share"] == 0.5
    assert f["exact_share_after_duplicates"] == 0.75
    assert f["drift"] == 1 and f["speed_total"] == 41 and f["batch_total"] == 40
    assert f["causes"]["duplicates_beyond_window"] == {"cells": 1, "amount": 2.0}
    assert f["causes"]["late_events"] == {"cells": 1, "amount": -1.0}
    assert f["late"] == {"cells": 1, "records": 3, "cells_exact_after_duplicates": 0, "error": -1.0}
    assert [h["cells"] for h in f["error_histogram"]][:3] == [2, 1, 1], "errors 0, 0, 1 and 2"
    assert [d["drift"] for d in f["drift_over_time"]] == [2, -1, 0, 0]
    assert f["worst_keys"][0]["key"] == ["/p0"] and f["worst_keys"][0]["causes"] == {"duplicates_beyond_window": 2}
    assert len(f["scatter"]) == 4 and sum(p[2] for p in f["scatter"]) == 2

    details = view_report(PAGE_VIEWS, cells["page_views"])
    assert details["finest"] == "minute" and details["differences_total"] == 2
    summary = view_summary(PAGE_VIEWS, {**details, "granularities": {"minute": f}})
    assert summary["drift"] == 1 and summary["cells_by_cause"]["late_events"] == 1
    assert not summary["ok"], "a late-event error is a problem"


def test_distinct_views_report_the_sketch_error_against_its_bound():
    ids = [cell_id("unique_visitors", "minute", [f"/p{i}"], T0 + i * MINUTE) for i in range(3)]
    batch = {cid: BatchCell(1000, 1000, 1000) for cid in ids}
    realtime = {ids[0]: 1000.0, ids[1]: 1010.0, ids[2]: 990.0}
    cells, _ = match_cells([UNIQUE_VISITORS], realtime, batch, *window(), ttl_floor_s=0)
    f = granularity_figures(UNIQUE_VISITORS, cells["unique_visitors"])
    assert f["causes"]["sketch_approximation"]["cells"] == 2 and f["causes"]["unexplained"]["cells"] == 0
    assert f["hll"]["cells"] == 3 and f["hll"]["within_1x"] == 1.0
    assert f["hll"]["max_abs_relative_error"] == pytest.approx(0.01)


def test_the_assembled_document_has_the_reports_shape(settings, report):
    assert report["id"].endswith("-run-__img_src_x_onerror_alert_1") and report["version"] == 7
    assert set(report) >= {"id", "created", "window", "ok", "problems", "summary", "settings", "inputs", "views"}
    assert report["window"]["start"] == "2026-01-01T10:00:00Z" and report["window"]["start_ms"] == T0 * 1000
    assert report["inputs"]["skipped_expired_ingest_buckets"] == 0 and report["inputs"]["realtime_rows_read"] > 0
    assert report["summary"]["page_views"]["causes"]["duplicates_beyond_window"] == 2
    assert report["ok"], report["problems"]
    differing = report["views"]["page_views"]["differences"]
    assert differing and {tuple(d["key"]) for d in differing} == {(HOSTILE,)}


def test_rows_the_clean_up_deletes_while_the_report_reads_them_are_left_out_not_blamed(monkeypatch):
    """A clean-up that began after the report had read where earlier ones deleted (a manual batch's
    swap moved the cutoff meanwhile) deleted rows while the report read them: each missing cell was
    blamed on the speed layer. The clean-up records where it deletes before deleting, so what is read
    after the rows covers every deletion the read could meet."""
    from definitions.settings import Settings
    from reports import build, read
    from reports.cells import RealtimeSnapshot
    from stores import registry

    start_ms, end_ms = window()
    deleted = cell_id("page_views", "minute", ["/a"], T0 + MINUTE)
    kept = cell_id("page_views", "minute", ["/a"], T0 + 5 * MINUTE)
    runs: dict[int, dict] = {1: {}}

    class Store:
        def runs(self):
            return {v: dict(r) for v, r in runs.items()}

    def read_realtime(_settings, lo, hi, _views):
        runs[1] = {"realtime_cleaned_s": {"page_views": T0 + 5 * MINUTE}}  # recorded, then deleted meanwhile
        return RealtimeSnapshot(lo, hi, 0, {kept: 2.0})

    monkeypatch.setattr(registry, "version_store", lambda _settings: Store())
    monkeypatch.setattr(read, "read_realtime", read_realtime)
    monkeypatch.setattr(read, "wait_for_speed_layer", lambda *_: {"caught_up": True})
    monkeypatch.setattr(build, "read_versions", lambda _settings: type("V", (), {"maintained": [PAGE_VIEWS]})())
    exact = {deleted: BatchCell(5, 5, 5), kept: BatchCell(2, 2, 2)}
    settings = Settings(ingest_bucket_s=60)
    monkeypatch.setattr(build.time, "time", lambda: T0 + 3_600)  # the window's rows are within their TTL
    comparison = build.compare_window(settings, None, start_ms, end_ms, batch=(exact, {}))
    assert [(c.ingest_bucket, c.diff) for c in comparison.cells["page_views"]] == [(T0 + 5 * MINUTE, 0)]
    assert comparison.skipped["cleaned_ingest_buckets"] == 1


def test_ingest_buckets_whose_batch_cells_were_not_computed_count_as_left_out_once():
    """reports.read.batch_cells lists the ingest buckets below the TTL floor instead of computing
    their cells; a bucket listed there and holding a realtime cell too is left out once."""
    expired_realtime = cell_id("page_views", "minute", ["/b"], T0)
    inside = cell_id("page_views", "minute", ["/a"], T0 + 2 * MINUTE)
    cells, skipped = match_cells(
        [PAGE_VIEWS],
        {expired_realtime: 1.0, inside: 1.0},
        {inside: BatchCell(1, 1, 1)},
        *window(),
        ttl_floor_s=T0 + 2 * MINUTE,
        expired={T0, T0 + MINUTE, T0 - 10 * MINUTE},  # the last one is outside the window
    )
    assert skipped["expired_ingest_buckets"] == 2
    assert [c.ingest_bucket for c in cells["page_views"]] == [T0 + 2 * MINUTE]


def test_after_a_raise_of_the_ttl_a_report_leaves_out_the_buckets_whose_rows_had_the_old_one(monkeypatch):
    from definitions.settings import Settings
    from reports import build, read
    from reports.cells import RealtimeSnapshot
    from stores import registry

    start_ms, end_ms = window()
    asked = []

    def batch_cells(_settings, _spark, _views, lo, hi, cells_from_s=None):
        asked.append(cells_from_s)
        return {}, {}

    settings = Settings(ingest_bucket_s=60)
    old_ttl = settings.realtime_ttl_s
    raised_ms = (T0 + 3 * MINUTE) * 1000  # the TTL went to ten times the old one then
    record = ((0, old_ttl), (raised_ms, 10 * old_ttl))
    monkeypatch.setattr(registry, "version_store", lambda _settings: type("S", (), {"runs": lambda self: {}})())
    monkeypatch.setattr(
        read, "read_realtime", lambda _s, lo, hi, _v: RealtimeSnapshot(lo, hi, 0, {}, ttl_changes=record)
    )
    monkeypatch.setattr(read, "wait_for_speed_layer", lambda *_: {"caught_up": True})
    monkeypatch.setattr(read, "batch_cells", batch_cells)
    monkeypatch.setattr(build, "read_versions", lambda _settings: type("V", (), {"maintained": [PAGE_VIEWS]})())
    monkeypatch.setattr(build.time, "time", lambda: T0 + old_ttl - build.TTL_MARGIN_S + 5 * MINUTE)
    build.compare_window(settings, None, start_ms, end_ms)
    assert asked == [T0 + 3 * MINUTE], "rows written before the raise are gone; those after it are there"


def test_a_report_asks_the_batch_side_only_for_cells_within_the_realtime_ttl(monkeypatch):
    from definitions.settings import Settings
    from reports import build, read
    from reports.cells import RealtimeSnapshot
    from stores import registry

    start_ms, end_ms = window()
    kept = cell_id("page_views", "minute", ["/a"], T0 + 5 * MINUTE)
    asked = []

    def batch_cells(_settings, _spark, _views, lo, hi, cells_from_s=None):
        asked.append((lo, hi, cells_from_s))
        return {kept: BatchCell(2, 2, 2)}, {"master_records_in_window": 9, read.BUCKETS_NOT_COMPUTED: [T0, T0 + MINUTE]}

    monkeypatch.setattr(registry, "version_store", lambda _settings: type("S", (), {"runs": lambda self: {}})())
    monkeypatch.setattr(read, "read_realtime", lambda _s, lo, hi, _v: RealtimeSnapshot(lo, hi, 0, {kept: 2.0}))
    monkeypatch.setattr(read, "wait_for_speed_layer", lambda *_: {"caught_up": True})
    monkeypatch.setattr(read, "batch_cells", batch_cells)
    monkeypatch.setattr(build, "read_versions", lambda _settings: type("V", (), {"maintained": [PAGE_VIEWS]})())
    settings = Settings(ingest_bucket_s=60)
    now = T0 + settings.realtime_ttl_s - build.TTL_MARGIN_S + 2 * MINUTE  # the TTL floor: T0 + 2 minutes
    monkeypatch.setattr(build.time, "time", lambda: now)
    comparison = build.compare_window(settings, None, start_ms, end_ms)
    assert asked == [(start_ms, end_ms, T0 + 2 * MINUTE)]
    assert comparison.skipped["expired_ingest_buckets"] == 2
    assert comparison.inputs == {"master_records_in_window": 9}, "the listed buckets are no figure of the report"


def test_cells_of_a_view_before_the_speed_layer_maintained_it_are_left_out_not_blamed():
    """A view added to a running platform (or declared anew) is maintained by the speed layer from
    its restart on: its batch cells in ingest buckets before then had no speed side, and each was
    blamed as counted by one layer only, so the report after `views apply` was not ok."""
    from definitions.views import TOP_PAGES
    from reports.build import maintained_from_s

    # page_views maintained from the first start; top_pages from 2.5 minutes into the window: the
    # bucket it began in holds part of its events only, so it is left out too.
    maintained_ms = {"page_views": 0, "top_pages": (T0 + 2 * MINUTE + 30) * 1000}
    bounds = maintained_from_s(maintained_ms, [PAGE_VIEWS, TOP_PAGES], MINUTE, window()[1])
    assert bounds == {"page_views": 0, "top_pages": T0 + 3 * MINUTE}
    early = cell_id("top_pages", "minute", ["/a"], T0 + 2 * MINUTE)
    late = cell_id("top_pages", "minute", ["/a"], T0 + 3 * MINUTE)
    views = cell_id("page_views", "minute", ["/a"], T0 + MINUTE)
    batch = {early: BatchCell(5, 5, 5), late: BatchCell(2, 2, 2), views: BatchCell(1, 1, 1)}
    cells, skipped = match_cells(
        [PAGE_VIEWS, TOP_PAGES], {late: 2.0, views: 1.0}, batch, *window(), 0, maintained_s=bounds
    )
    assert skipped["unmaintained_ingest_buckets"] == 1
    assert [(c.ingest_bucket, c.diff) for c in cells["top_pages"]] == [(T0 + 3 * MINUTE, 0)]
    assert [(c.ingest_bucket, c.diff) for c in cells["page_views"]] == [(T0 + MINUTE, 0)]
    # A view the speed layer does not maintain yet (declared, not restarted for): nothing to compare.
    assert maintained_from_s({"page_views": 0}, [PAGE_VIEWS, TOP_PAGES], MINUTE, window()[1]) == {
        "page_views": 0,
        "top_pages": window()[1] // 1000,
    }
    # No record (the speed layer never started, or a marker from before views were recorded): no bound.
    assert maintained_from_s(None, [PAGE_VIEWS, TOP_PAGES], MINUTE, window()[1]) == {}


def test_the_realtime_snapshot_says_since_when_each_view_is_maintained(monkeypatch, settings):
    """read_realtime records the speed layer's marker with the rows; a replay that switched answers for
    its view from the replay's start, earlier than a view added since may have been maintained."""
    from reports import read
    from stores import checkpoints, replays

    marker = checkpoints.Marker(60, 0, views={"page_views": 0, "top_pages": (T0 + 5 * MINUTE) * 1000})
    overlay = replays.ReplayMark(
        "top_pages", T0 * 1000, T0 * 1000, shadow="top_pages__replay", split_ms=(T0 + 9 * MINUTE) * 1000
    )
    monkeypatch.setattr("stores.realtime_scan.rows_ingested_between", lambda *a, **k: iter(()))
    monkeypatch.setattr("stores.replays.read_overlays", lambda _settings: {"top_pages": overlay})
    monkeypatch.setattr("stores.realtime_schema.read_ttl_changes", lambda _settings: ())
    monkeypatch.setattr("stores.checkpoints.read_marker", lambda _settings: marker)
    snapshot = read.read_realtime(settings, T0 * 1000, (T0 + 10 * MINUTE) * 1000, [PAGE_VIEWS])
    assert snapshot.maintained_ms == {"page_views": 0, "top_pages": T0 * 1000}

    def unreadable(_settings):
        raise checkpoints.MarkerUnreadable("no marker")

    monkeypatch.setattr("stores.checkpoints.read_marker", unreadable)
    assert read.read_realtime(settings, T0 * 1000, (T0 + 10 * MINUTE) * 1000, [PAGE_VIEWS]).maintained_ms is None


def test_the_drift_over_time_a_report_stores_is_bounded_whatever_its_windows_length():
    """One entry per ingest bucket made a report's JSON grow with its window (a week of minute buckets
    per view and granularity); past MAX_DRIFT_POINTS, neighbouring buckets share one entry that keeps
    their sums and the largest drift among them."""
    from reports.compare import MAX_DRIFT_POINTS

    buckets = 3 * MAX_DRIFT_POINTS + 7
    ids = [cell_id("page_views", "minute", ["/a"], T0 + i * MINUTE) for i in range(buckets)]
    batch = {cid: BatchCell(10, 10, 10) for cid in ids}
    realtime = {cid: 10.0 for cid in ids}
    realtime[ids[5]] = 13.0
    cells, _ = match_cells([PAGE_VIEWS], realtime, batch, T0 * 1000, (T0 + buckets * MINUTE) * 1000, ttl_floor_s=0)
    f = granularity_figures(PAGE_VIEWS, cells["page_views"])
    series = f["drift_over_time"]
    assert len(series) <= MAX_DRIFT_POINTS
    assert sum(d["cells"] for d in series) == buckets and sum(d["batch"] for d in series) == 10 * buckets
    assert sum(d["buckets"] for d in series) == buckets and all(type(d["cells"]) is int for d in series)
    assert max(d["drift"] for d in series) == 3 and series[0]["ingest_bucket"] == min(
        c.ingest_bucket for c in cells["page_views"]
    )


def test_cells_the_batch_never_counted_give_no_mape_not_a_perfect_one():
    """Three cells the speed layer alone counted (5 each): the report said MAPE 0.000 %."""
    ids = [cell_id("page_views", "minute", [f"/s{i}"], T0 + i * MINUTE) for i in range(3)]
    cells, _ = match_cells([PAGE_VIEWS], dict.fromkeys(ids, 5.0), {}, *window(), ttl_floor_s=0)
    f = granularity_figures(PAGE_VIEWS, cells["page_views"])
    assert f["mean_abs_error"] == 5 and f["mape_percent"] is None
    both = [cell_id("page_views", "minute", ["/b"], T0)]
    cells, _ = match_cells([PAGE_VIEWS], {both[0]: 9.0}, {both[0]: BatchCell(10, 10, 10)}, *window(), ttl_floor_s=0)
    assert granularity_figures(PAGE_VIEWS, cells["page_views"])["mape_percent"] == 10
