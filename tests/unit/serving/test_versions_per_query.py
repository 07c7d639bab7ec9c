"""Each query resolves the views' definitions from the pointer it reads, and keeps them for its
whole check: the service's shared versions are made again from whichever pointer a query holds,
and a query holding the pointer from before a switch, interleaved with one holding the pointer
from after it, looked its view up in the other's definitions (KeyError: a 500)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from definitions.settings import Settings
from definitions.view_versions import storage_name
from definitions.views import PAGE_VIEWS, Registry
from serving_layer import service as service_module
from serving_layer.answers import ViewBuilding
from serving_layer.service import ServingLayer
from stores.checkpoints import Marker
from stores.pointer import Pointer, ViewEntry
from stores.pointer_moves import switch
from tests.unit.serving.test_serving_caches import MemoryBatchViews, NoRealtime  # noqa: F401 - named below

CHANGED = replace(PAGE_VIEWS, where="event_type = 'page_view' AND device = 'mobile'")
NEW = storage_name("page_views", CHANGED.fingerprint)
BEFORE = Pointer({"page_views": ViewEntry("page_views_v1", 1, 60_000), NEW: ViewEntry(f"{NEW}_v2", 2, 120_000)})
AFTER = switch(BEFORE, "page_views", NEW, 1)
BOTH = Marker(
    60,
    0,
    views={"page_views": 0, NEW: 100},
    definitions={"page_views": PAGE_VIEWS.fingerprint, NEW: CHANGED.fingerprint},
    declarations={"page_views": PAGE_VIEWS.shape(), NEW: CHANGED.shape()},
)


def _serving(tmp_path, declared: Registry) -> ServingLayer:
    settings = Settings(
        state_dir=tmp_path,
        stores={
            "batch_views": "tests.unit.serving.test_serving_caches.MemoryBatchViews",
            "realtime_reader": "tests.unit.serving.test_serving_caches.NoRealtime",
        },
    )
    serving = ServingLayer(settings, views=declared)
    serving.speed.known(BOTH)
    return serving


def test_a_query_from_the_pointer_before_a_switch_beside_one_from_after_it(tmp_path, monkeypatch):
    serving = _serving(tmp_path, Registry((CHANGED,)))
    serving._refresh_versions(BEFORE)
    route = serving.versions.served["page_views"]
    assert route.name == "page_views"
    real = service_module.answering_view

    def another_query_refreshes_in_between(versions, view, pointer, granularity):
        answering = real(versions, view, pointer, granularity)
        serving._refresh_versions(AFTER)  # a query holding the switched pointer, on another thread
        return answering

    monkeypatch.setattr(service_module, "answering_view", another_query_refreshes_in_between)
    assert serving._check_serving(route, BEFORE, "minute").name == "page_views"
    assert serving._check_serving(route, AFTER, "minute").name == NEW
    # The shared versions follow the newest pointer, whatever order the queries came in.
    serving._refresh_versions(BEFORE)
    assert serving.versions.served["page_views"].name == NEW


def test_a_query_of_a_view_dropped_while_it_was_under_way_is_refused_not_a_500(tmp_path):
    serving = _serving(tmp_path, Registry((CHANGED,)))
    serving._refresh_versions(BEFORE)
    route = serving.versions.served["page_views"]
    serving.reload(Registry(()))  # every view dropped; this query's route was matched before
    with pytest.raises(ViewBuilding, match="no longer declared"):
        serving._check_serving(route, BEFORE, "minute")


def test_a_re_made_pointer_store_is_taken_up_once_the_older_versions_have_aged(tmp_path, monkeypatch):
    """A pointer of a lower generation is a query still holding the one before a switch, or, once
    api.pointer_cache_s has passed, a pointer store made again: the service takes that one up (as
    its pointer cache does), or its routes would never follow the views again."""
    serving = _serving(tmp_path, Registry((CHANGED,)))
    clock = [1_000.0]
    monkeypatch.setattr(service_module.time, "monotonic", lambda: clock[0])
    serving._refresh_versions(AFTER)
    remade = Pointer({"page_views": ViewEntry("page_views_v1", 1, 60_000), NEW: ViewEntry(f"{NEW}_v2", 2, 120_000)})
    assert remade.generation < AFTER.generation
    assert serving._refresh_versions(remade).served["page_views"].name == "page_views"
    assert serving.versions.served["page_views"].name == NEW, "kept within api.pointer_cache_s"
    clock[0] += serving.settings.api.pointer_cache_s + 1
    serving._refresh_versions(remade)
    assert serving.versions.served["page_views"].name == "page_views"
