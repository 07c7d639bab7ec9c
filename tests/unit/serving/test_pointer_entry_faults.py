"""A fault in one view's pointer entry refuses that view's queries only, with a 503 naming the store:
one entry whose cutoff is off the speed layer's ingest buckets made every view a 503, and an alias
naming a storage no version knows was a 409 "ask again" for ever."""

from __future__ import annotations

import pytest

from definitions.views import PAGE_VIEWS, PAGE_VIEWS_BY_CHANNEL, Registry
from serving_layer.service import ServingLayer, StoreUnavailable
from stores.pointer import Pointer, ViewEntry
from tests.unit.serving.test_serving_caches import HOUR, MemoryBatchViews, _serving

ALIGNED = 1_800_000_000_000 - 1_800_000_000_000 % (HOUR * 1000)


def _with(serving: ServingLayer, batch: MemoryBatchViews, pointer: Pointer) -> Pointer:
    batch.doc = pointer.to_doc()
    read = serving.batch.pointer()
    assert read is not None
    return read


def test_a_cutoff_off_the_ingest_buckets_refuses_only_its_own_view(tmp_path):
    serving, batch = _serving(tmp_path)
    pointer = _with(
        serving,
        batch,
        Pointer(
            {
                "page_views": ViewEntry("page_views_v1", 1, ALIGNED),
                "page_views_by_channel": ViewEntry("page_views_by_channel_v1", 1, ALIGNED + 60_000),
            }
        ),
    )
    assert serving._check_serving(PAGE_VIEWS, pointer, "hour").name == "page_views", "the other view answers"
    with pytest.raises(StoreUnavailable) as refused:
        serving._check_serving(PAGE_VIEWS_BY_CHANNEL, pointer, "hour")
    assert "page_views_by_channel" in refused.value.detail and "ingest buckets" in refused.value.detail
    states = {s.name: s for s in serving.view_states()}  # /api/v1/views and the status say it too
    assert "ingest buckets" in (states["page_views_by_channel"].stale or ""), states["page_views_by_channel"]
    assert "ingest buckets" not in (states["page_views"].stale or "")


def test_an_alias_to_a_storage_no_version_knows_is_a_503_naming_it(tmp_path):
    serving, batch = _serving(tmp_path)
    serving.reload(Registry((PAGE_VIEWS,)))
    pointer = Pointer(
        {"page_views": ViewEntry("page_views_v1", 1, ALIGNED)}, aliases={"page_views": "page_views_by_channel"}
    )
    with pytest.raises(StoreUnavailable) as refused:
        serving._check_serving(PAGE_VIEWS, _with(serving, batch, pointer), "hour")
    assert "alias" in refused.value.detail and "page_views_by_channel" in refused.value.detail
