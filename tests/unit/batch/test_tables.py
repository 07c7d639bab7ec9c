"""batch_layer.tables: which views a run computes once for several tables."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from batch_layer import tables
from batch_layer.tables import same_cells
from definitions.views import BUILT_IN, PAGE_VIEWS, TOP_PAGES
from stores.batch_writer import TableStats, VerificationError


def test_views_equal_but_for_layout_are_computed_once():
    groups = same_cells(BUILT_IN)
    assert [[v.name for v in g] for g in groups] == [
        ["page_views", "top_pages"],
        ["unique_visitors"],
        ["page_views_by_country_device"],
        ["page_views_by_channel"],
    ]


def test_any_difference_in_what_decides_the_cells_keeps_views_apart():
    described = dataclasses.replace(PAGE_VIEWS, name="described", description="other words")
    assert len(same_cells([PAGE_VIEWS, described])) == 1
    for change in (
        {"where": "event_type = 'click'"},
        {"granularities": ("hour", "day")},
        {"keys": ("url", "country")},
        {"defaults": {"channel": "web"}, "keys": ("url", "channel")},
    ):
        other = dataclasses.replace(TOP_PAGES, name="other", **change)
        assert len(same_cells([PAGE_VIEWS, other])) == 2, change


class Written:
    def __init__(self, cells: int) -> None:
        self.stats = TableStats(cells, cells, cells)


@pytest.fixture
def fake_stores(monkeypatch):
    """write_tables' orchestration alone: writing and scanning replaced (the real ones are
    exercised on the stack by tests/integration/batch)."""
    calls: dict[str, list] = {"written": [], "verified": [], "counters": []}
    wrong: set[str] = set()
    found_wrong = threading.Event()

    def write_group(settings, spark, version, group, events, bulk):
        if group[0].name == "page_views_by_country_device" and "unique_visitors" in wrong:
            assert found_wrong.wait(10)  # the scan of an earlier table has come back wrong by now
        calls["written"].append([v.name for v in group])
        return {v.name: [Written(7)] for v in group}

    def verify(settings, name, view, expected, splits, counter=None):
        calls["verified"].append(name)
        calls["counters"].append(counter)
        if view.name in wrong:
            found_wrong.set()
            raise VerificationError(f"table {name} holds less")

    monkeypatch.setattr(tables, "_write_group", write_group)
    monkeypatch.setattr(tables, "verify_table", verify)
    monkeypatch.setattr(tables, "table_splits", lambda settings, written: [])
    monkeypatch.setattr(tables.batch_bulk_load, "range_counter", lambda settings, spark, name, view: ("jvm", name))
    return calls, wrong


def test_every_table_is_written_and_verified(fake_stores):
    calls, _ = fake_stores
    stats, splits = tables.write_tables(None, None, 3, list(BUILT_IN), None, bulk=True)
    assert calls["written"] == [[v.name for v in g] for g in same_cells(BUILT_IN)]
    assert sorted(calls["verified"]) == sorted(f"{v.name}_v3" for v in BUILT_IN)
    assert stats == {v.name: TableStats(7, 7, 7) for v in BUILT_IN}
    assert splits == {v.name: [] for v in BUILT_IN}
    assert calls["counters"] == [("jvm", name) for name in calls["verified"]], "a bulk run counts from its driver"


def test_a_puts_run_counts_through_thrift(fake_stores):
    calls, _ = fake_stores
    tables.write_tables(None, None, 3, list(BUILT_IN), None, bulk=False)
    assert calls["counters"] == [None] * len(list(BUILT_IN))


def test_a_table_found_wrong_stops_the_run_before_the_next_group(fake_stores):
    calls, wrong = fake_stores
    wrong.add("unique_visitors")
    with pytest.raises(VerificationError, match="unique_visitors_v3"):
        tables.write_tables(None, None, 3, list(BUILT_IN), None, bulk=True)
    # the check before each group sees the failure (one group of slack for the scan's thread)
    assert "page_views_by_channel" not in [g[0] for g in calls["written"]]


def test_the_last_tables_verification_still_decides_the_run(fake_stores):
    calls, wrong = fake_stores
    wrong.add("page_views_by_channel")
    with pytest.raises(VerificationError, match="page_views_by_channel_v3"):
        tables.write_tables(None, None, 3, list(BUILT_IN), None, bulk=True)
    assert "page_views_by_channel_v3" in calls["verified"]


def test_a_failed_run_does_not_wait_for_the_scan_in_progress(monkeypatch):
    """The run is recorded failed at once: the verification thread's scan is left to end on its own."""
    scanning, release = threading.Event(), threading.Event()

    def write_group(settings, spark, version, group, events, bulk):
        if group[0].name == "unique_visitors":
            assert scanning.wait(10)
            raise RuntimeError("a Spark job failed")
        return {v.name: [Written(7)] for v in group}

    def verify(settings, name, view, expected, splits, counter=None):
        scanning.set()
        release.wait(60)

    monkeypatch.setattr(tables, "_write_group", write_group)
    monkeypatch.setattr(tables, "verify_table", verify)
    monkeypatch.setattr(tables, "table_splits", lambda settings, written: [])
    monkeypatch.setattr(tables.batch_bulk_load, "range_counter", lambda settings, spark, name, view: None)
    started = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match="Spark job failed"):
            tables.write_tables(None, None, 3, list(BUILT_IN), None, bulk=True)
        assert time.monotonic() - started < 30
    finally:
        release.set()


def test_a_run_retention_gave_up_makes_no_more_tables(monkeypatch):
    """Retention dropped a silent run's tables and deleted its record while its process went on (a
    clock far behind, a paused machine): the tables it made next were named by no run record, and
    retention drops only tables its runs made, so they stayed for good. It now stops first."""
    from types import SimpleNamespace

    from stores import registry

    states = {3: "writing"}
    created: list[str] = []

    def record_run_if(version, expected, **fields):
        return states.get(version) == expected

    store = SimpleNamespace(record_run_if=record_run_if, runs=lambda: {v: {"state": s} for v, s in states.items()})
    monkeypatch.setattr(registry, "version_store", lambda _settings: store)
    monkeypatch.setattr(tables, "create_table", lambda settings, name: created.append(name))
    monkeypatch.setattr(tables, "compute_each", lambda view, events: [])
    group = [PAGE_VIEWS]
    tables._write_group(None, None, 3, group, None, bulk=False)
    assert created == [f"{PAGE_VIEWS.name}_v3"]
    del states[3]  # given up: its record deleted
    with pytest.raises(RuntimeError, match="no longer recorded writing .*gone.*run the batch again") as refused:
        tables._write_group(None, None, 3, group, None, bulk=False)
    assert not isinstance(refused.value, VerificationError), "exit 1, which the DAG retries: not a refusal"
    assert created == [f"{PAGE_VIEWS.name}_v3"], "no table made after"
