"""A declaration both layers would compute differently, or that fails a layer only once it runs, is
refused when the views load (`views apply` step 1: nothing changed), naming the view and what is
wrong. Each of these was accepted, then stopped the speed layer or every batch run for all views."""

from __future__ import annotations

import pytest

from definitions.views import View


def test_a_granularity_named_twice_is_refused():
    """The speed layer counted each event twice, and every batch run's verification failed (the cells
    written twice, held once), for every view."""
    with pytest.raises(ValueError, match=r"view twice_hourly: a granularity is named twice: \['hour', 'hour'\]"):
        View("twice_hourly", keys=("url",), aggregation="count", granularities=("hour", "hour"))


@pytest.mark.parametrize("aggregation", ["Count", "avg", "", None, 1])
def test_an_aggregation_not_among_the_three_is_refused(aggregation):
    """ "Count" had the speed layer write zeros and every batch run fail."""
    with pytest.raises(ValueError, match=r"view odd: aggregation must be one of \['count', 'sum', 'distinct'\]"):
        View("odd", keys=("url",), aggregation=aggregation)


@pytest.mark.parametrize("layout", ["by_time", "BY_KEY", "", None])
def test_a_layout_not_among_the_two_is_refused(layout):
    """ "by_time" was laid out by key by one store module and by bucket by another: every load failed
    its verification."""
    with pytest.raises(ValueError, match=r"view odd: layout must be one of \['by_key', 'by_bucket'\]"):
        View("odd", keys=("url",), aggregation="count", layout=layout)


@pytest.mark.parametrize("where", ["   ", "\n", 3, b"url = 'a'"])
def test_a_filter_that_is_no_text_or_blank_is_refused(where):
    with pytest.raises(ValueError, match=r"view odd: where must be a Spark SQL predicate or None"):
        View("odd", keys=("url",), aggregation="count", where=where)


@pytest.mark.parametrize("field", ["keys", "granularities"])
def test_a_text_where_a_tuple_of_names_is_expected_is_refused(field):
    """`keys="url"` was read as the columns u, r and l."""
    values = {"keys": ("url",), "granularities": ("hour",), field: "url" if field == "keys" else "hour"}
    with pytest.raises(ValueError, match=rf"view odd: {field} must be a tuple or list of names"):
        View("odd", aggregation="count", **values)


def test_the_declarations_that_stay_accepted():
    assert View("ok", keys=["url"], aggregation="count", granularities=["day", "hour"]).keys == ("url",)
    assert View("ok", keys=("url",), aggregation="count", where=" event_type = 'click' ").where
    assert View("ok", keys=("url",), aggregation="count", where="").where == "", "no filter, as it always was"
