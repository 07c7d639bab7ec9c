"""A view's keys are text or whole-number event fields: a timestamp key was written under one row key
by the batch layer's Python (a naive local datetime's text) and another by Spark (UTC, milliseconds),
so its cells were split or its load's verification failed. Views bucket event time already."""

from __future__ import annotations

import pytest

from definitions.events import FIELDS
from definitions.views import View


def test_a_timestamp_key_is_refused_naming_the_field_and_what_to_use():
    with pytest.raises(ValueError, match=r"event_time.*granularit"):
        View("by_time", keys=("url", "event_time"), aggregation="count")


@pytest.mark.parametrize("field", [f.name for f in FIELDS if f.kind in ("string", "int")])
def test_text_and_number_fields_can_be_keys(field):
    assert View("by_field", keys=(field,), aggregation="count").keys == (field,)
