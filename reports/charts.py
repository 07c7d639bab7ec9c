"""The report's charts, drawn by matplotlib's SVG backend and inlined into the HTML page.

Each chart is an `<svg role="img" aria-label="…">` element: matplotlib's document without its XML
prolog, DOCTYPE and metadata (so the page refers to no URL), ids unique per chart (salted with the
chart's label), text kept as text. matplotlib escapes every label it writes; the aria-label is
escaped here.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from markupsafe import Markup, escape
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from definitions.times import iso_s
from reports.compare import merge_buckets

CAUSE_LABELS = {
    "duplicates_beyond_window": "duplicates beyond the window",
    "accepted_by_one_layer": "accepted by one layer only",
    "sketch_approximation": "sketch approximation",
    "late_events": "late events",
    "unexplained": "unexplained",
}
CAUSE_COLORS = {
    "duplicates_beyond_window": "#e08a2c",
    "accepted_by_one_layer": "#8e5bc4",
    "sketch_approximation": "#3b82c4",
    "late_events": "#c43b6b",
    "unexplained": "#c62828",
}
BLUE, GREY, INK, AXIS, GRID = "#2f6fb0", "#cfd5de", "#4a5262", "#8a93a3", "#eef0f3"
STYLE: dict[Any, Any] = {  # matplotlib rc parameters (typed by name in its stubs)
    "svg.fonttype": "none",  # text stays text (selectable, small)
    "text.parse_math": False,  # a label with $ in it is plain text
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": 8.5,
    "text.color": INK,
    "axes.labelcolor": INK,
    "axes.edgecolor": AXIS,
    "axes.linewidth": 0.8,
    "xtick.color": INK,
    "ytick.color": INK,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.dpi": 72,  # one point a pixel: sizes below are the old page's pixels
}
_AUTO_ID = re.compile(r' id="[A-Za-z][\w.]*_\d+"')  # matplotlib's own group ids (figure_1, patch_3 …)


# --- scales and ticks -----------------------------------------------------------------------------


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for m in (1, 2, 2.5, 5, 10):
        if value <= m * exp:
            return m * exp
    return 10 * exp


def _log_ticks(top: float) -> list[float]:
    """0, 1, 10, 100 … up to `top`."""
    return [0.0] + [10.0**i for i in range(0, 12) if 10.0**i <= top * 1.0001]


def _sqrt_ticks(peak: float) -> list[float]:
    """Round values spread evenly on a square-root scale up to `peak`."""
    nice = sorted(m * 10**e for e in range(0, 10) for m in (1, 2, 5))
    out = [0.0]
    for frac in (0.04, 0.16, 0.36, 0.64, 1.0):  # evenly spaced after the square root
        target = peak * frac
        best = min((v for v in nice if v <= peak), key=lambda v: abs(v - target), default=peak)
        if math.sqrt(best / peak) - math.sqrt(out[-1] / peak) >= 0.12:
            out.append(float(best))
    return out


def _log1p_scale(axis: str, ax: Axes) -> None:
    """log10(1 + n): a few large bins do not hide small ones, and 0 stays on the axis."""
    functions = (lambda v: np.log10(1 + np.maximum(v, 0)), lambda y: 10.0**y - 1)
    (ax.set_yscale if axis == "y" else ax.set_xscale)("function", functions=functions)


def _sqrt_scale(ax: Axes) -> None:
    functions = (lambda v: np.sqrt(np.maximum(v, 0)), lambda y: np.square(y))
    ax.set_xscale("function", functions=functions)
    ax.set_yscale("function", functions=functions)


def _count(value: float) -> str:
    value = float(value)
    return f"{int(value):,}" if value.is_integer() else f"{value:,.1f}"


# --- figure and SVG -------------------------------------------------------------------------------


@contextmanager
def _figure(label: str, width: int, height: int) -> Iterator[tuple[Figure, Axes]]:
    # The label salts matplotlib's ids (clip paths, markers): unique per chart in one page, stable.
    with rc_context({**STYLE, "svg.hashsalt": label}):
        fig = Figure(figsize=(width / 72, height / 72))
        ax = fig.add_subplot()
        ax.tick_params(length=3, width=0.6)
        yield fig, ax


def _svg(fig: Figure, label: str) -> Markup:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    opening = re.match(r"<svg\b[^>]*>", text)
    if opening is None:  # pragma: no cover — matplotlib always writes one
        raise ValueError("matplotlib wrote no <svg> element")
    box = re.search(r'viewBox="([0-9. ]+)"', opening.group(0))
    head = (
        f'<svg viewBox="{box.group(1) if box else "0 0 100 100"}" role="img" aria-label="{escape(label)}" '
        'preserveAspectRatio="xMidYMid meet">'
    )
    body = _AUTO_ID.sub("", text[opening.end() :]).replace("xlink:href=", "href=")
    return Markup(head + body.strip())


# --- the charts -----------------------------------------------------------------------------------


def bar_chart(
    labels: Sequence[str],
    values: Sequence[float],
    label: str,
    color: str = BLUE,
    log: bool = False,
    highlight: Sequence[bool] | None = None,
    width: int = 560,
    height: int = 230,
) -> Markup:
    """Vertical bars with their values; `log` uses a log10(1 + n) scale; highlighted non-zero bars are red."""
    with _figure(label, width, height) as (fig, ax):
        colors = [
            CAUSE_COLORS["unexplained"] if highlight and highlight[i] and v else color for i, v in enumerate(values)
        ]
        x = list(range(len(values)))
        bars = ax.bar(x, values, width=0.76, color=colors)
        ax.bar_label(bars, labels=[_count(v) if v else "" for v in values], fontsize=7.5, padding=2)
        top = max(values, default=0) or 1
        if log:
            _log1p_scale("y", ax)
            ax.set_yticks(_log_ticks(top), [_count(t) for t in _log_ticks(top)])
            ax.set_ylim(0, 10 ** (math.log10(1 + top) * 1.12) - 1)
        else:
            ax.set_ylim(0, _nice_max(top) * 1.08)
        step = 1 if len(x) <= 12 else math.ceil(len(x) / 12)
        ax.set_xticks(x[::step], [str(lab) for lab in labels][::step])
        ax.grid(axis="y", color=GRID, linewidth=0.8)
        ax.set_axisbelow(True)
        fig.tight_layout(pad=0.6)
        return _svg(fig, label)


def scatter_chart(points: Sequence[Sequence[float]], label: str, width: int = 560, height: int = 300) -> Markup:
    """Speed (y) against batch (x) per cell, on a √ scale; the dashed diagonal is perfect agreement."""
    with _figure(label, width, height) as (fig, ax):
        peak = _nice_max(max([max(p[0], p[1]) for p in points] + [1]))
        ordered = sorted(points, key=lambda p: p[2])  # the differing cells drawn last, on top
        points_id = "scatter-points-" + re.sub(r"[^A-Za-z0-9_-]", "-", label)  # <g id=…>: one <use> a point
        colors = [(0.776, 0.157, 0.157, 0.85) if p[2] else (0.184, 0.435, 0.690, 0.35) for p in ordered]
        sizes = [32 if p[2] else 18 for p in ordered]
        ax.plot([0, peak], [0, peak], linestyle=(0, (4, 3)), color="#9aa2b1", linewidth=0.9)
        ax.scatter(
            [p[0] for p in ordered],
            [p[1] for p in ordered],
            s=sizes,
            c=colors,
            linewidths=0,
            gid=points_id,
        )
        _sqrt_scale(ax)
        ticks = _sqrt_ticks(peak)
        ax.set_xticks(ticks, [_count(t) for t in ticks])
        ax.set_yticks(ticks, [_count(t) for t in ticks])
        ax.set_xlim(0, peak)
        ax.set_ylim(0, peak)
        ax.grid(color=GRID, linewidth=0.8)
        ax.set_axisbelow(True)
        ax.set_xlabel("batch value (√ scale)")
        ax.set_ylabel("speed value")
        fig.tight_layout(pad=0.6)
        return _svg(fig, label)


def fill_buckets(series: Sequence[dict], bucket_s: int, window: dict | None = None, limit: int = 400) -> list[dict]:
    """The series with an empty entry for every ingest bucket of the window (or of the series' span)
    that has no cells, so the axis is time; unchanged when that would be too many buckets."""
    if not bucket_s or (not series and not window):
        return list(series)
    first = min([d["ingest_bucket"] for d in series[:1]] + ([window["start_ms"] // 1000] if window else []))
    last = max([d["ingest_bucket"] for d in series[-1:]] + ([window["end_ms"] // 1000 - bucket_s] if window else []))
    first = max(first, (series[0]["ingest_bucket"] if series else last) - limit * bucket_s)
    if (last - first) // bucket_s + 1 > limit:
        return list(series)
    have = {d["ingest_bucket"]: d for d in series}
    empty = {"speed": 0, "batch": 0, "drift": 0, "abs_error": 0, "cells": 0, "duplicates": 0}
    return [have.get(b) or {"ingest_bucket": b, "time": iso_s(b), **empty} for b in range(first, last + 1, bucket_s)]


def drift_chart(series: Sequence[dict], label: str, width: int = 1140, height: int = 220) -> Markup:
    """Per ingest bucket: drift (speed − batch) as bars around zero; orange when duplicates explain it
    all. At most 400 bars: past that, neighbouring buckets share one, showing the largest drift
    among them (merge_buckets)."""
    series = merge_buckets(series)
    with _figure(label, width, height) as (fig, ax):
        drifts = [float(d["drift"]) for d in series]
        colors = [
            CAUSE_COLORS["duplicates_beyond_window"]
            if d["drift"] and abs(d["drift"] - d.get("duplicates", 0)) < 0.5
            else (CAUSE_COLORS["sketch_approximation"] if d["drift"] else GREY)
            for d in series
        ]
        x = list(range(len(series)))
        ax.bar(x, drifts, width=0.8, color=colors)
        ax.axhline(0, color=AXIS, linewidth=0.8)
        lo, hi = min([0.0, *drifts]), max([0.0, *drifts])
        span = _nice_max(max(abs(lo), abs(hi))) if (lo or hi) else 1.0
        ax.set_ylim(-1.08 * span if lo < 0 else 0.0, 1.08 * span if hi > 0 or lo == 0 else 0.0)
        ax.set_xlim(-0.6, max(len(series), 1) - 0.4)
        step = max(1, math.ceil(len(series) / 10))
        ax.set_xticks(x[::step], [str(d["time"])[11:16] for d in series][::step])
        ax.grid(axis="y", color=GRID, linewidth=0.8)
        ax.set_axisbelow(True)
        ax.set_xlabel("ingest bucket (UTC)")
        fig.tight_layout(pad=0.6)
        return _svg(fig, label)


def hll_chart(hll: dict, label: str, width: int = 560, height: int = 250) -> Markup:
    """Relative error in units of the bound, with the ±1×, ±2×, ±3× bands shaded (cells, log scale)."""
    with _figure(label, width, height) as (fig, ax):
        values = [b["cells"] for b in hll["histogram"]]
        # bins: [< -4], 16 half-unit bins from -4 to +4, [> +4]: centres in units of the bound
        centres = [-4.25] + [-4 + 0.5 * i + 0.25 for i in range(len(values) - 2)] + [4.25]
        for k, shade in ((3, "#fbf3e6"), (2, "#f3f0e0"), (1, "#e6f4ec")):
            ax.axvspan(-k, k, color=shade, linewidth=0)
            for sign in (-1, 1):
                ax.text(
                    sign * k, 1.02, f"{'+' if sign > 0 else '−'}{k}×", transform=ax.get_xaxis_transform(), ha="center"
                )
        ax.bar(centres, values, width=0.4, color=CAUSE_COLORS["sketch_approximation"])
        top = max(values, default=0) or 1
        _log1p_scale("y", ax)
        ax.set_yticks(_log_ticks(top), [_count(t) for t in _log_ticks(top)])
        ax.set_ylim(0, 10 ** (math.log10(1 + top) * 1.05) - 1)
        ax.set_xlim(-4.6, 4.6)
        ax.set_xticks(range(-4, 5, 2), [f"{v:+d}" for v in range(-4, 5, 2)])
        ax.set_xlabel(f"relative error ÷ bound {100 * hll['bound']:.3f} % (cells, log scale)")
        fig.tight_layout(pad=0.6)
        return _svg(fig, label)


def cause_chart(summary: dict, label: str, width: int = 1140) -> Markup:
    """Per view, a horizontal bar per cause: cells whose difference it explains (all granularities)."""
    views = list(summary.items())
    rows = len(views) * len(CAUSE_LABELS)
    height = 24 + 17 * rows + 18 * len(views)
    with _figure(label, width, height) as (fig, ax):
        y, ticks, names = 0.0, [], []
        peak = max([s["cells_by_cause"][c] for _, s in views for c in CAUSE_LABELS] + [1])
        for view, s in views:
            ax.text(0, y - 0.2, str(view)[:34], transform=ax.get_yaxis_transform(), fontweight="bold", ha="right")
            y += 1
            for cause, cause_label in CAUSE_LABELS.items():
                cells = s["cells_by_cause"][cause]
                ax.barh(y, cells, height=0.72, color=CAUSE_COLORS[cause])
                ax.text(cells + peak * 0.006, y, f"{_count(cells)} cells", va="center")
                ticks.append(y)
                names.append(cause_label)
                y += 1
            y += 0.3
        ax.set_yticks(ticks, names)
        ax.set_ylim(y - 0.5, -1.2)
        ax.set_xlim(0, peak * 1.12)
        ax.tick_params(axis="y", length=0)
        ax.xaxis.set_visible(False)
        ax.spines[["left", "bottom"]].set_visible(False)
        fig.tight_layout(pad=0.6)
        return _svg(fig, label)
