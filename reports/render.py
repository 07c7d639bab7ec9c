"""An accuracy report (reports.build) as one self-contained HTML page.

Jinja2 templates (templates/report.html, its pieces in templates/macros.html, the CSS in
templates/report.css) with autoescape on: everything taken from a report — keys are user
controlled URLs — is text, never markup. The charts are SVG drawn by matplotlib (reports.charts).
No external URL, no script: inline CSS and SVG only (the API serves the page under a policy that
allows no script at all).
"""

from __future__ import annotations

import unicodedata
from functools import cache

from jinja2 import Environment, PackageLoader
from markupsafe import Markup, escape

from reports.charts import (
    CAUSE_COLORS,
    CAUSE_LABELS,
    bar_chart,
    cause_chart,
    drift_chart,
    fill_buckets,
    hll_chart,
    scatter_chart,
)

SHORT_CAUSES = {
    "duplicates_beyond_window": "duplicates beyond window",
    "accepted_by_one_layer": "one layer only",
    "sketch_approximation": "sketch",
    "late_events": "late events",
    "unexplained": "unexplained",
}


# --- filters --------------------------------------------------------------------------------------


def num(value, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


def pct(share) -> str:
    if share is None:
        return "–"
    return "100 %" if share >= 1 else f"{100 * share:.2f} %"


def percent(fraction, digits: int) -> str:
    return "–" if fraction is None else f"{100 * fraction:.{digits}f} %"


def fixed(value, digits: int) -> str:
    return f"{float(value):.{digits}f}"


# Characters that print nothing or change how what follows reads: controls (C0, C1), formats (the
# bidirectional marks, overrides and isolates, zero-width spaces, the soft hyphen), line and
# paragraph separators. Not the joiners (ZWNJ in Persian words, ZWJ in emoji sequences) nor tag
# characters (subdivision flags), which print as part of what they join.
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
SHOWN_FORMATS = frozenset({0x200C, 0x200D, *range(0xE0020, 0xE0080)})


def _hidden(c: str) -> bool:
    return unicodedata.category(c) in HIDDEN_CATEGORIES and ord(c) not in SHOWN_FORMATS


def visible(text: str) -> str:
    """`text` with each character that prints nothing or changes how the rest reads shown as its
    escape (`\\u202e`), and a backslash as two (a key holding the text `\\u202e` reads apart from
    one holding the character): a key is user controlled, and a right-to-left override in it made a
    table show another url than the one counted (the page's escaping keeps markup out, not these)."""
    return "".join(
        "\\\\" if c == "\\" else (f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}") if _hidden(c) else c
        for c in text
    )


def key_label(key) -> str:
    if isinstance(key, (list, tuple)):
        return " · ".join(visible(str(k)) for k in key)
    return visible(str(key))


def wbr(text) -> Markup:
    """Escaped text with a line-break opportunity after each underscore."""
    return escape(str(text)).replace("_", Markup("_<wbr>"))


@cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("reports", "templates"),
        autoescape=True,  # every template, whatever its name: a report's data is never markup
        trim_blocks=False,
        keep_trailing_newline=True,
    )
    env.filters.update(num=num, pct=pct, percent=percent, fixed=fixed, key_label=key_label, wbr=wbr)
    env.globals.update(cause_labels=CAUSE_LABELS, cause_colors=CAUSE_COLORS, short_causes=SHORT_CAUSES)
    return env


def fragment(macro: str, *args) -> Markup:
    """One piece of the page (a macro of templates/macros.html), e.g. fragment("worst_keys", rows)."""
    return Markup(getattr(environment().get_template("macros.html").module, macro)(*args))


def worst_keys_table(rows: list[dict]) -> Markup:
    return fragment("worst_keys", rows)


def worst_cells_table(rows: list[dict]) -> Markup:
    return fragment("worst_cells", rows)


# --- the page -------------------------------------------------------------------------------------


def _view_charts(view: dict, bucket_s: int, window: dict | None) -> dict:
    fine = view["granularities"][view["finest"]]
    name = view["name"]
    charts: dict = {"view": view, "histogram": None, "scatter": None, "drift": None, "hll": None}
    charts["drifts"] = any(d["drift"] for d in fine["drift_over_time"])
    if fine["cells"]:
        hist = fine["error_histogram"]
        charts["histogram"] = bar_chart(
            [h["bin"] for h in hist],
            [h["cells"] for h in hist],
            f"{name} error histogram",
            log=True,
            highlight=[i > 0 for i in range(len(hist))],
        )
        charts["scatter"] = scatter_chart(fine["scatter"], f"{name} speed versus batch")
        charts["drift"] = drift_chart(
            fill_buckets(fine["drift_over_time"], bucket_s, window), f"{name} drift over time"
        )
    if "hll" in fine:
        charts["hll"] = hll_chart(fine["hll"], f"{name} HLL relative error")
    return charts


def _inputs(report: dict) -> list[tuple[str, str]]:
    speed = report.get("speed_layer", {})
    inputs = report.get("inputs", {})
    caught = speed.get("caught_up")
    caught_text = (
        ("yes" if caught else "NO — rows may be missing")
        if caught is not None
        else f"snapshot read {speed.get('snapshot_read', '')}"
    )
    return [
        ("records ingested in the window", num(inputs.get("master_records_in_window"))),
        ("first copies (what the batch counts)", num(inputs.get("first_copies"))),
        ("duplicates within the window (both drop)", num(inputs.get("duplicate_copies_within_window"))),
        ("duplicates beyond the window (speed counts again)", num(inputs.get("duplicate_copies_beyond_window"))),
        ("late events (> 1 h)", num(inputs.get("late_records"))),
        ("realtime rows read", num(inputs.get("realtime_rows_read"))),
        ("speed layer past the cutoff", caught_text),
        ("ingest buckets past the realtime TTL (skipped)", num(inputs.get("skipped_expired_ingest_buckets"))),
        (
            "ingest buckets of a view the realtime clean-up deleted (skipped)",
            num(inputs.get("skipped_cleaned_ingest_buckets", 0)),
        ),
        (
            "ingest buckets of a view before the speed layer maintained it (skipped)",
            num(inputs.get("skipped_unmaintained_ingest_buckets", 0)),
        ),
    ]


def render_html(report: dict) -> str:
    """The report as one self-contained HTML page (inline CSS and SVG, no script, no external URL)."""
    settings = report.get("settings", {})
    bucket_s = int(settings.get("ingest_bucket_s") or 0)
    window = report["window"]
    return (
        environment()
        .get_template("report.html")
        .render(
            report=report,
            window=window,
            st=settings,
            inputs=_inputs(report),
            cause_chart=cause_chart(report["summary"], "cells per cause"),
            views=[_view_charts(view, bucket_s, window) for view in report["views"].values()],
        )
    )
