"""The report page: Jinja2 with autoescape (keys are user-controlled URLs), charts drawn by
matplotlib, self-contained (no service)."""

from __future__ import annotations

import html.parser

import pytest

from reports import charts, render
from tests.unit.reports.conftest import HOSTILE


class Elements(html.parser.HTMLParser):
    """The elements of a page: tags, event handler attributes, charts, and the points of each scatter
    plot (matplotlib draws them in its group `scatter-points-…`: a <path> each, or a <use> each of a
    marker defined once in <defs>)."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.handlers: list[str] = []
        self.svg_labels: list[str | None] = []
        self.points: dict[str, int] = {}
        self.open: list[tuple[str, str]] = []  # (tag, id) of the open SVG groups and defs

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.append(tag)
        self.handlers += [name for name, _ in attrs if name.startswith("on")]
        if tag == "svg":
            self.svg_labels.append(dict(attrs).get("aria-label"))
        scatter = next((i for t, i in self.open if i.startswith("scatter-points-")), None)
        in_defs = any(t == "defs" for t, _ in self.open)
        if scatter and (tag == "use" or (tag == "path" and not in_defs)):
            self.points[scatter] = self.points.get(scatter, 0) + 1
        if tag in ("g", "defs"):
            self.open.append((tag, dict(attrs).get("id") or ""))

    def handle_endtag(self, tag) -> None:
        if tag in ("g", "defs") and self.open:
            self.open.pop()


def parsed(markup: str) -> Elements:
    parser = Elements()
    parser.feed(markup)
    return parser


def test_the_environment_autoescapes_every_template():
    env = render.environment()
    for name in ("report.html", "macros.html", "report.css"):
        assert env.autoescape is True or env.autoescape(name)


def test_a_hostile_url_is_text_in_the_page_never_a_tag(report):
    page = render.render_html(report)
    elements = parsed(page)
    assert "img" not in elements.tags and "script" not in elements.tags and not elements.handlers
    assert "<img" not in page
    assert "/&lt;img src=x onerror=alert(1)&gt;" in page, "the key is shown, escaped"


def test_the_tables_escape_keys_and_causes():
    payload = HOSTILE + "<script>x()</script>'\"&"
    rows = [
        {"key": [payload, "DE"], "cells": 1, "abs_error": 2, "max_abs_error": 2, "drift": 2, "causes": {payload: 2}}
    ]
    cells = [
        {
            **rows[0],
            "granularity": payload,
            "event_bucket": "2026-01-01T10:00:00Z",
            "ingest_bucket": "2026-01-01T10:00:00Z",
            "batch": 1,
            "speed": 3,
            "diff": 2,
            "recounts": 0,
            "late_records": 0,
        }
    ]
    for part in (render.worst_keys_table(rows), render.worst_cells_table(cells)):
        elements = parsed(part)
        assert {"table", "td"} <= set(elements.tags)
        assert not {"img", "script"} & set(elements.tags) and not elements.handlers, part
        assert "&lt;img src=x onerror=alert(1)&gt;" in part and "&lt;script&gt;" in part


def test_charts_escape_their_labels():
    for chart in (
        charts.bar_chart([HOSTILE], [3], HOSTILE),
        charts.drift_chart([{"time": HOSTILE, "drift": 1, "cells": 1, "duplicates": 0}], HOSTILE),
        charts.cause_chart({HOSTILE: {"cells_by_cause": dict.fromkeys(charts.CAUSE_LABELS, 1)}}, HOSTILE),
    ):
        elements = parsed(chart)
        assert elements.tags[0] == "svg" and elements.svg_labels == [HOSTILE]
        assert "img" not in elements.tags and not elements.handlers and "<img" not in chart


def test_the_page_holds_the_charts_matplotlib_drew(report, monkeypatch):
    drawn: list[str] = []
    savefig = charts.Figure.savefig

    def spy(self, fname, *args, **kwargs):
        savefig(self, fname, *args, **kwargs)
        drawn.append(fname.getvalue())

    monkeypatch.setattr(charts.Figure, "savefig", spy)
    page = render.render_html(report)
    labels = [label for label in parsed(page).svg_labels if label]
    assert "cells per cause" in labels and "unique_visitors HLL relative error" in labels
    for view in report["views"]:
        for chart in ("error histogram", "speed versus batch", "drift over time"):
            assert f"{view} {chart}" in labels
    assert len(drawn) == len(labels), "every chart of the page was drawn by matplotlib"
    for svg in drawn:
        assert svg.lstrip().startswith("<?xml") and "Matplotlib" in svg
        assert svg[svg.index("<defs>") : svg.index("</defs>")] in page
    assert page.count("<svg") == len(labels)
    points = parsed(page).points
    for name, view in report["views"].items():
        scatter = view["granularities"][view["finest"]]["scatter"]
        assert points[f"scatter-points-{name}-speed-versus-batch"] == len(scatter) > 0, "one mark a point"
    assert '<g id="scatter-points-page_views-speed-versus-batch">' in page


def test_the_page_is_self_contained(report):
    page = render.render_html(report)
    assert "://" not in page and "<script" not in page.lower() and "<link" not in page.lower()
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page and ":root {" in page
    assert "measured 0" in page and "duplicates beyond the window" in page
    assert 'id="view-page_views"' in page and 'id="view-unique_visitors"' in page


@pytest.mark.parametrize("n", [3, 300])
def test_a_scatter_plot_draws_every_point(n):
    chart = charts.scatter_chart([[i, i + i % 3, i % 2] for i in range(n)], "many points")
    assert parsed(chart).points == {"scatter-points-many-points": n}


@pytest.mark.parametrize(
    "key, shown",
    [
        ("/a\u202egnp.exe", "/a\\u202egnp.exe"),  # right-to-left override: the rest would read reversed
        ("/a\u2066b\u2069", "/a\\u2066b\\u2069"),  # isolates
        ("/a\u200fb", "/a\\u200fb"),  # right-to-left mark
        ("/a\u009b2J", "/a\\u009b2J"),  # 8-bit CSI
        ("/a\u2028b\u2029", "/a\\u2028b\\u2029"),  # line and paragraph separators
        ("/a\u200bb\ufeff", "/a\\u200bb\\ufeff"),  # zero width: two keys that look the same
        ("/a\u00adb", "/a\\u00adb"),  # soft hyphen
        ("/a\\u202eb", "/a\\\\u202eb"),  # the text of an escape reads apart from the character
        ("/café/日本/😀", "/café/日本/😀"),  # what prints is shown as it is
        ("/fa/نیم\u200cفاصله", "/fa/نیم\u200cفاصله"),  # a joiner in a word
        ("/👨\u200d👩\u200d👧", "/👨\u200d👩\u200d👧"),  # an emoji sequence
        ("/🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f", None),  # a subdivision flag
    ],
)
def test_a_key_shows_its_invisible_and_direction_changing_characters_as_escapes(key, shown):
    """A key is user controlled: shown as it is, a right-to-left override made the table show another
    url than the one counted, and a zero-width space two keys that look the same."""
    shown = key if shown is None else shown
    assert render.key_label(key) == shown
    assert render.key_label([key, "DE"]) == f"{shown} · DE"
    rows = [{"key": [key], "cells": 1, "abs_error": 2, "max_abs_error": 2, "drift": 2, "causes": {}}]
    table = render.worst_keys_table(rows)
    assert key not in table or key == shown, "the raw characters reach neither the cell nor its title"
