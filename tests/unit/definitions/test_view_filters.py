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
    "cast_of_text": ("country = 1", "fails on some events instead of judging them \\(.*CAST_INVALID_INPUT"),
    "division": ("10 / (schema_version - 2) > 1", "fails on some events .*DIVIDE_BY_ZERO"),
    "by_a_constant_0": ("schema_version / 0 > 1", "fails on some events .*DIVIDE_BY_ZERO"),
    "reflection": ("reflect('java.lang.System', 'exit', 0) IS NULL", "not deterministic"),
    "hidden_column": ("id = 1", "names a column the layers do not give"),  # the probes' own, below them
    "millis_in_an_int": ("CAST(unix_millis(event_time) AS INT) > 0", "fails on some events .*CAST_OVERFLOW"),
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
    "10 / schema_version > 1",  # never 0 nor missing: validation makes an absent one 1
    "schema_version / 2 > 0",
    "url RLIKE '^/p[0-9]+$' AND NOT startswith(url, '/admin')",
    "hour(event_time) BETWEEN 8 AND 18 AND coalesce(device, 'none') <> 'bot'",
    "CAST(event_time AS DATE) > DATE '2026-01-01' AND event_time > '2026-01-01'",
    "length(url) + 1 > 3 AND try_cast(substr(url, 2) AS INT) IS NOT NULL",
    "split(url, '/')[1] = 'product' AND array_contains(array('DE', 'FR'), country)",
    "event_time >= to_timestamp('2024-01-01 00:00:00') AND nullif(device, '') IS NOT NULL",
    "extract(HOUR FROM event_time) < 12 AND md5(user_id) LIKE '0%' AND regexp_extract(url, '^/([a-z]+)', 1) <> ''",
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


def test_an_event_shaped_past_the_probes_is_not_in_the_view_in_either_layer(spark):
    """The probes never reach the cast behind `LIKE`: one valid event of url /product/abc failed
    every batch run for good (it stays in the master dataset) and stopped the speed layer at every
    restart. Both layers now judge it not in the view, alike."""
    from pyspark.sql import functions as F

    from definitions.views import cells

    where = "url LIKE '/product/%' AND CAST(substring_index(url, '/', -1) AS INT) > 100"
    events = spark.sql(
        "SELECT * FROM VALUES ('/product/abc', timestamp'2026-01-01 00:00:10'), "
        "('/product/123', timestamp'2026-01-01 00:00:20'), ('/a', timestamp'2026-01-01 00:00:30') AS t(url, event_time)"
    )
    with pytest.raises(Exception, match="CAST_INVALID_INPUT"):
        events.where(where).count()
    view = View("products", keys=("url",), aggregation="count", where=where)
    assert [(r["url"], r["value"]) for r in view.compute(events, "minute").collect()] == [("/product/123", 1)]
    speed = events.select(F.explode(F.array(*cells(view))).alias("cell")).where("cell IS NOT NULL")
    assert [r["cell"]["key"] for r in speed.collect()] == [["/product/123"]] * len(view.granularities)
