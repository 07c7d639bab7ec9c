"""The generator's settings are refused, naming the field, when no run could honour them: `nan`
passed every `< 0` check (`lambdactl generate --rate nan`, bench, demo and Python callers)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from ingest.generator import GeneratorConfig


@pytest.mark.parametrize("field", ["rate", "span_s", "late_min_s", "late_max_s"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_time_or_rate_that_is_no_finite_number_is_refused(field, value):
    with pytest.raises(ValueError, match=field):
        GeneratorConfig(**{field: value})


@pytest.mark.parametrize("field", ["late_fraction", "duplicate_fraction", "invalid_fraction", "v1_fraction"])
def test_a_fraction_that_is_no_number_is_refused(field):
    with pytest.raises(ValueError, match=field):
        GeneratorConfig(**{field: math.nan})


def test_the_defaults_are_accepted():
    assert GeneratorConfig().rate >= 0


@pytest.mark.parametrize(
    "fields, named",
    [
        # each built its whole list in memory before sending anything: MemoryError, or the host's OOM killer
        ({"pages": 10**9}, "pages"),
        ({"users": 10**9}, "users"),
        ({"count": 10**9, "span_s": 3_600.0}, "count"),
        # an event time before 1970 or past 9999 raised OverflowError part-way, records already sent
        ({"late_fraction": 0.1, "late_max_s": 1e12}, "late_max_s"),
        ({"span_s": 1e11}, "span_s"),
        ({"start": datetime(1970, 1, 1, 1, tzinfo=UTC), "span_s": 7_200.0}, "span_s"),
        # "late" events stamped in the future
        ({"late_min_s": -3e8, "late_max_s": -3e8}, "late_min_s"),
        # time.sleep(1e300) overflowed; 1e-9 waited 31 years for the first record
        ({"rate": 1e-300}, "rate"),
        ({"rate": 1e-9}, "rate"),
        # the simulated span's end, without a span, was passed over: events stamped now
        ({"start": datetime(2020, 1, 1, tzinfo=UTC)}, "start"),
        ({"topic": ""}, None),  # the settings' topic: fine
    ],
)
def test_values_no_run_could_honour_are_refused_naming_the_field(fields, named):
    if named is None:
        GeneratorConfig(**fields)
        return
    with pytest.raises(ValueError, match=named):
        GeneratorConfig(**fields)


def test_the_largest_values_taken_are_generated_in_bounded_time():
    """The bounds sit where a run still starts in seconds: a generator at each is built at once."""
    from ingest.generator import MAX_PAGES, MAX_USERS, ClickstreamGenerator

    gen = ClickstreamGenerator(GeneratorConfig(pages=MAX_PAGES, users=MAX_USERS, count=3))
    assert len(gen.urls) == MAX_PAGES and len(gen.user_traits) == MAX_USERS
    assert len(list(gen.records())) == 3
