"""The attribution of one cell's difference between the speed layer and the batch layer to its causes,
case by case (no stack needed)."""

from __future__ import annotations

import pytest

from reports.attribute import attribute
from reports.cells import BatchCell, Cell


def test_attribution_rules():
    """The attribution of one cell's difference, case by case (no stack needed)."""
    from definitions.views import PAGE_VIEWS, UNIQUE_VISITORS

    def cell(view, speed, present=True, **batch):
        c = Cell(view.name, "minute", '["/x"]', 0, 0, speed, present, BatchCell(**batch))
        attribute(view, c)
        return c.parts, c.not_recounted

    # additive: duplicates beyond the window explain exactly their recounts; the rest is named
    assert cell(PAGE_VIEWS, 12, batch=10, expected=12, first_records=10, recounts=2) == (
        {"duplicates_beyond_window": 2},
        0,
    )
    assert cell(PAGE_VIEWS, 11, batch=10, expected=12, first_records=10, recounts=2) == (
        {"duplicates_beyond_window": 1},
        1,
    )
    assert cell(PAGE_VIEWS, 15, batch=10, expected=12, first_records=10, recounts=2) == (
        {"duplicates_beyond_window": 2, "unexplained": 3},
        0,
    )
    assert cell(PAGE_VIEWS, 9, batch=10, expected=10, first_records=10, late_records=4) == ({"late_events": -1}, 0)
    assert cell(PAGE_VIEWS, 0, present=False, batch=3, expected=3, first_records=3) == (
        {"accepted_by_one_layer": -3},
        0,
    )
    assert cell(PAGE_VIEWS, 4, batch=0, expected=0) == ({"accepted_by_one_layer": 4}, 0)
    assert cell(PAGE_VIEWS, 10, batch=10, expected=10, first_records=10, late_records=10) == ({}, 0)
    # distinct: the sketch's error within 3× the bound, beyond it named
    parts, _ = cell(UNIQUE_VISITORS, 1010.0, batch=1000, expected=1000, first_records=1000)
    assert parts == {"sketch_approximation": 10.0}
    parts, _ = cell(UNIQUE_VISITORS, 1100.0, batch=1000, expected=1000, first_records=1000)
    assert parts == {"unexplained": 100.0}
    # candidates the speed layer still de-duplicated (its state outlives the window a little): named, not an error
    parts, not_recounted = cell(UNIQUE_VISITORS, 1000.2, batch=1000, expected=1300, first_records=1000, recounts=300)
    assert parts == {"sketch_approximation": pytest.approx(0.2)} and not_recounted == 300
    parts, _ = cell(UNIQUE_VISITORS, 1290.0, batch=1000, expected=1300, first_records=1000, recounts=300)
    assert parts == {"duplicates_beyond_window": 300, "sketch_approximation": -10.0}
