"""definitions.view_filters, with the local Spark it starts: every filter a layer could not use, or
would judge differently from the other layer, is named with its view and why; the usual ones pass."""

from __future__ import annotations

import re

import pytest

from definitions.view_filters import check_filters, filter_problems, probe_times
from definitions.views import BUILT_IN, View

NOW_MS = 1_796_000_000_000
TIMES = probe_times(946_684_800, 3_600, NOW_MS)

REFUSED = {
    "unparsed": ("url =", "Syntax error"),
    "unknown_column": ("nosuch = 1", "nosuch"),
    "dropped_column": ("reason IS NULL", "reason"),  # the master dataset's verdict: the speed layer has none
    "not_a_test": ("url", "not a boolean"),
    "aggregate": ("count(*) > 1", "count"),
    "random": ("rand() < 0.5", "Rand is not deterministic"),
    "clock": ("event_time > current_timestamp() - INTERVAL 1 DAY", "CurrentTimestamp depends on when"),
    "today": ("to_date(event_time) = current_date()", "CurrentDate depends on when"),
    "subquery": ("url IN (SELECT '/a')", "subquery"),
    "cast_of_text": ("country = 1", "casts text to bigint: .*use try_cast"),
    "division": ("10 / (schema_version - 2) > 1", "Divide by a value of the event fails on a 0"),
    "by_a_constant_0": ("schema_version / 0 > 1", "fails on some events .*DIVIDE_BY_ZERO"),
    "reflection": ("reflect('java.lang.System', 'exit', 0) IS NULL", "not deterministic"),
    "hidden_column": ("id = 1", "names a column the layers do not give"),  # the probes' own, below them
    "millis_in_an_int": ("CAST(unix_millis(event_time) AS INT) > 0", "fails on some events .*CAST_OVERFLOW"),
    # Guarded so that no probe reaches the cast: one event of url '/product/abc' stopped both layers.
    "guarded_cast": (
        "url LIKE '/product/%' AND CAST(substring_index(url, '/', -1) AS INT) > 100",
        "casts text to int: an event whose text is no int would stop the layers; use try_cast",
    ),
    "case_guarded_cast": (
        "CASE WHEN length(url) = 7 THEN CAST(substr(url, 2) AS INT) > 0 ELSE false END",
        "casts text to int",
    ),
    "pattern_from_the_event": ("url RLIKE country", "RLike takes its pattern from the event"),
    "unlisted_function": ("parse_url(url, 'HOST') IS NULL", "ParseUrl is not among the expressions"),
    "text_to_date": ("to_date(url) IS NULL", "ParseToDate parses text from the event"),
    "division_by_a_column": ("10 / schema_version > 1", "Divide by a value of the event.*try_divide"),
}
ACCEPTED = [
    "event_type = 'page_view'",
    "try_cast(url AS INT) > 3",
    "schema_version >= 2 AND country IN ('DE', 'FR')",
    "lower(url) LIKE '/a%' OR url IS NULL",
    "ingest_time > event_time",
    "try_divide(10, schema_version - 2) > 1",
    # No event is ingested after now: an ingest time's seconds still fit an INT until 2038.
    "CAST(unix_timestamp(ingest_time) AS INT) > 1700000000",
    "schema_version / 2 > 0",  # by a constant
    "url RLIKE '^/p[0-9]+$' AND NOT startswith(url, '/admin')",
    "hour(event_time) BETWEEN 8 AND 18 AND coalesce(device, 'none') <> 'bot'",
    "CAST(event_time AS DATE) > DATE '2026-01-01' AND event_time > '2026-01-01'",
    "length(url) + 1 > 3 AND try_cast(substr(url, 2) AS INT) IS NOT NULL",
]


@pytest.fixture(scope="module")
def checked():
    views = [View(name, keys=("url",), aggregation="count", where=where) for name, (where, _) in REFUSED.items()]
    views += [View(f"fine_{i}", keys=("url",), aggregation="count", where=w) for i, w in enumerate(ACCEPTED)]
    views.append(View("unfiltered", keys=("url",), aggregation="count"))
    views.append(View("empty_filter", keys=("url",), aggregation="count", where=""))  # none, as it always was
    return check_filters(views, {}, TIMES)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_filter_the_layers_cannot_use_is_named_with_why(checked, name):
    where, why = REFUSED[name]
    found = [p for p in checked if p.startswith(f"view {name}: where {where!r}: ")]
    assert len(found) == 1, checked
    assert re.search(why, found[0]), found[0]


def test_the_usual_filters_pass(checked):
    assert not [p for p in checked if p.startswith(("view fine_", "view unfiltered", "view empty_filter"))], checked
    assert len(checked) == len(REFUSED)


def test_the_built_in_views_filters_pass(spark):
    assert filter_problems(spark, BUILT_IN, TIMES) == []


def test_a_check_that_cannot_run_says_so(monkeypatch):
    monkeypatch.setattr("sys.executable", "/bin/false")
    problems = check_filters([View("v", keys=("url",), aggregation="count", where="url = 'a'")], {}, TIMES)
    assert problems == ["the views' filters could not be checked (exit status 1): "]
    assert check_filters([View("v", keys=("url",), aggregation="count")], {}, TIMES) == [], "no filter: no Spark"


def test_the_probes_times_are_those_validation_allows():
    assert TIMES == {
        "event_time": [946_684_800_000, NOW_MS, NOW_MS + 3_600_000],
        "ingest_time": [946_684_800_000, NOW_MS],
    }


def test_the_longest_text_probed_is_the_one_the_settings_let_an_event_hold():
    """Probed at the contract's 2,048 characters, a filter failing only on a longer url passed with
    events.max_url_chars = 4,000, and stopped the layers at the first such event."""
    where = "CASE WHEN length(url) > 2100 THEN CAST(length(url) AS TINYINT) > 0 ELSE true END"
    view = View("long_urls", keys=("url",), aggregation="count", where=where)
    raised = probe_times(946_684_800, 3_600, NOW_MS, max_lens={"url": 4_000})
    assert raised["url"] == [4_000]
    problems = check_filters([view], {}, raised)
    assert len(problems) == 1 and "CAST_OVERFLOW" in problems[0], problems
