"""The generator's settings are refused, naming the field, when no run could honour them: `nan`
passed every `< 0` check (`lambdactl generate --rate nan`, bench, demo and Python callers)."""

from __future__ import annotations

import math

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
