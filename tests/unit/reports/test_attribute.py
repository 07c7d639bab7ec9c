"""The attribution of one cell's difference, case by case (no service)."""

from __future__ import annotations

import pytest

from definitions.views import PAGE_VIEWS, UNIQUE_VISITORS, View
from reports.attribute import CAUSES, attribute
from reports.cells import BatchCell, Cell


def attributed(view: View, speed: float, present: bool = True, **batch) -> tuple[dict, float]:
    cell = Cell(view.name, "minute", '["/x"]', 0, 0, speed, present, BatchCell(**batch))
    attribute(view, cell)
    assert set(cell.parts) <= set(CAUSES)
    assert sum(cell.parts.values()) == pytest.approx(cell.diff), "the causes add up to the difference"
    return cell.parts, cell.not_recounted


def test_duplicates_beyond_the_window_explain_exactly_their_recounts():
    assert attributed(PAGE_VIEWS, 12, batch=10, expected=12, first_records=10, recounts=2) == (
        {"duplicates_beyond_window": 2},
        0,
    )
    # one candidate the speed layer still de-duplicated (its state outlives the window a little)
    assert attributed(PAGE_VIEWS, 11, batch=10, expected=12, first_records=10, recounts=2) == (
        {"duplicates_beyond_window": 1},
        1,
    )
    # more than the recounts: the rest is named, not folded into the duplicates
    assert attributed(PAGE_VIEWS, 15, batch=10, expected=12, first_records=10, recounts=2) == (
        {"duplicates_beyond_window": 2, "unexplained": 3},
        0,
    )
    # short of the batch: no candidate was counted again, and the shortfall is the rest's alone (the
    # split said +2 duplicates and -3 unexplained)
    assert attributed(PAGE_VIEWS, 9, batch=10, expected=12, first_records=10, recounts=2) == (
        {"unexplained": -1},
        2,
    )


def test_a_late_event_cell_that_differs_is_named_late_events():
    assert attributed(PAGE_VIEWS, 9, batch=10, expected=10, first_records=10, late_records=4) == (
        {"late_events": -1},
        0,
    )
    # late events with no difference cost nothing
    assert attributed(PAGE_VIEWS, 10, batch=10, expected=10, first_records=10, late_records=10) == ({}, 0)
    # the same difference without late events is unexplained
    assert attributed(PAGE_VIEWS, 9, batch=10, expected=10, first_records=10) == ({"unexplained": -1}, 0)


def test_a_cell_of_one_layer_only_is_accepted_by_one_layer():
    assert attributed(PAGE_VIEWS, 0, present=False, batch=3, expected=3, first_records=3) == (
        {"accepted_by_one_layer": -3},
        0,
    )
    assert attributed(PAGE_VIEWS, 4, batch=0, expected=0) == ({"accepted_by_one_layer": 4}, 0)


def test_distinct_views_allow_the_sketch_its_error_and_no_more():
    parts, _ = attributed(UNIQUE_VISITORS, 1010.0, batch=1000, expected=1000, first_records=1000)
    assert parts == {"sketch_approximation": 10.0}
    parts, _ = attributed(UNIQUE_VISITORS, 1100.0, batch=1000, expected=1000, first_records=1000)
    assert parts == {"unexplained": 100.0}
    parts, not_recounted = attributed(
        UNIQUE_VISITORS, 1000.2, batch=1000, expected=1300, first_records=1000, recounts=300
    )
    assert parts == {"sketch_approximation": pytest.approx(0.2)} and not_recounted == 300
    parts, _ = attributed(UNIQUE_VISITORS, 1290.0, batch=1000, expected=1300, first_records=1000, recounts=300)
    assert parts == {"duplicates_beyond_window": 300, "sketch_approximation": -10.0}
