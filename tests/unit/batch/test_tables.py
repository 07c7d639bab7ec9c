"""batch_layer.tables: which views a run computes once for several tables."""

from __future__ import annotations

import dataclasses

from batch_layer.tables import same_cells
from definitions.views import BUILT_IN, PAGE_VIEWS, TOP_PAGES


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
