"""An accuracy report (batch_layer.accuracy) as one self-contained HTML page.

No external URL, no script: inline CSS and SVG charts drawn here in Python — a summary table per
view, the cause breakdown (late events always shown as a measured figure), and per view an error
histogram, a speed-versus-batch scatter plot, drift over time, the worst keys and cells, and for
distinct views the HyperLogLog relative error distribution against its bound.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from datetime import UTC

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
EXPLAINED = ("duplicates_beyond_window", "sketch_approximation")

CSS = """
:root { --ink:#1d2330; --muted:#5d6677; --line:#dde1e8; --bg:#f5f6f8; --card:#fff; --ok:#1b7f4b; --bad:#c62828;
        --speed:#e08a2c; --batch:#2f6fb0; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif; color:var(--ink); background:var(--bg); }
main { max-width:1280px; margin:0 auto; padding:24px 28px 48px; }
h1 { font-size:24px; margin:0 0 4px; } h2 { font-size:18px; margin:28px 0 10px; }
h3 { font-size:15px; margin:18px 0 8px; color:var(--muted); font-weight:600; }
.meta { color:var(--muted); margin-bottom:14px; } .meta b { color:var(--ink); font-weight:600; }
.card { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:16px 18px; margin:14px 0; }
.banner { border-radius:8px; padding:12px 16px; font-weight:600; margin:12px 0; }
.banner.ok { background:#e6f4ec; color:var(--ok); border:1px solid #b9dfc9; }
.banner.bad { background:#fdecec; color:var(--bad); border:1px solid #f3c2c2; }
.banner ul { margin:6px 0 0 18px; padding:0; font-weight:400; }
table { border-collapse:collapse; width:100%; font-variant-numeric:tabular-nums; font-size:13px; }
th, td { padding:5px 7px; border-bottom:1px solid var(--line); text-align:right; white-space:nowrap; }
th { white-space:normal; vertical-align:bottom; line-height:1.2; }
.scroll { overflow-x:auto; }
th { background:#f0f2f5; font-weight:600; font-size:12.5px; color:#3b4352; }
td.l, th.l { text-align:left; } td.key { font-family:ui-monospace,Menlo,Consolas,monospace; font-size:12.5px;
  max-width:340px; overflow:hidden; text-overflow:ellipsis; }
tr:nth-child(even) td { background:#fafbfc; }
.zero { color:#9aa2b1; } .pos { color:#b4561b; } .neg { color:#2f6fb0; } .bad { color:var(--bad); font-weight:600; }
.good { color:var(--ok); font-weight:600; }
.grid { display:grid; grid-template-columns:repeat(auto-fit,minmax(360px,1fr)); gap:14px; }
.chart { border:1px solid var(--line); border-radius:6px; padding:8px 10px 4px; background:#fff; }
.chart .t { font-weight:600; font-size:13px; margin-bottom:2px; } .chart .s { color:var(--muted); font-size:12px; }
svg { display:block; width:100%; height:auto; } svg text { font-family:inherit; fill:#4a5262; }
.pill { display:inline-block; padding:1px 8px; border-radius:10px; font-size:12px; font-weight:600; color:#fff; }
.kv { display:grid; grid-template-columns:repeat(auto-fit,minmax(210px,1fr)); gap:8px 18px; }
.kv div { border-left:3px solid var(--line); padding-left:8px; } .kv span { color:var(--muted); font-size:12px; display:block; }
.note { color:var(--muted); font-size:12.5px; }
.measured-zero { background:#e6f4ec; color:var(--ok); border-radius:4px; padding:1px 5px; font-weight:600; font-size:12px; }
.measured-nonzero { background:#fdecec; color:var(--bad); border-radius:4px; padding:1px 6px; font-weight:700; }
"""


# --- formatting -----------------------------------------------------------------------------------


def esc(value) -> str:
    return html.escape(str(value), quote=True)


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


def signed(value, digits: int = 2) -> str:
    if not value:
        return '<span class="zero">0</span>'
    cls = "pos" if value > 0 else "neg"
    return f'<span class="{cls}">{"+" if value > 0 else "−"}{num(abs(value), digits)}</span>'


def key_label(key) -> str:
    if isinstance(key, (list, tuple)):
        return " · ".join(str(k) for k in key)
    return str(key)


# --- SVG charts -----------------------------------------------------------------------------------


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for m in (1, 2, 2.5, 5, 10):
        if value <= m * exp:
            return m * exp
    return 10 * exp


def _ticks(top: float, n: int = 4) -> list[float]:
    return [top * i / n for i in range(n + 1)]


def _log_ticks(peak: float) -> list[float]:
    """0, 1, 10, 100 … up to a log10(1 + n) peak."""
    return [0.0] + [10.0**i for i in range(0, 12) if math.log10(1 + 10**i) <= peak + 1e-9]


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


def _svg(width: int, height: int, body: str, label: str) -> str:
    return (
        f'<svg viewBox="0 0 {width} {height}" role="img" aria-label="{esc(label)}" '
        f'preserveAspectRatio="xMidYMid meet">{body}</svg>'
    )


def bar_chart(
    labels: Sequence[str],
    values: Sequence[float],
    label: str,
    color: str = "#2f6fb0",
    log: bool = False,
    highlight: Sequence[bool] | None = None,
    width: int = 560,
    height: int = 230,
) -> str:
    """Vertical bars; `log` uses a log10(1 + n) scale so a few large bins do not hide small ones."""
    left, right, top, bottom = 46, 10, 14, 44
    w, h = width - left - right, height - top - bottom
    scale = (lambda v: math.log10(1 + v)) if log else (lambda v: v)
    peak = max([scale(v) for v in values] + [0])
    top_v = peak if log else _nice_max(max(values, default=0))
    top_v = top_v or 1.0
    parts = []
    ticks = _log_ticks(peak) if log else _ticks(top_v)
    for t in ticks:
        y = top + h - h * scale(t) / top_v
        if y < top - 1:
            continue
        parts.append(f'<line x1="{left}" x2="{left + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e6e9ee"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{esc(num(t, 0))}</text>')
    n = max(len(values), 1)
    slot = w / n
    for i, (lab, v) in enumerate(zip(labels, values)):
        bh = h * scale(v) / top_v if top_v else 0
        x = left + i * slot + slot * 0.12
        fill = CAUSE_COLORS["unexplained"] if highlight and highlight[i] and v else color
        parts.append(
            f'<rect x="{x:.1f}" y="{top + h - bh:.1f}" width="{slot * 0.76:.1f}" height="{max(bh, 0):.1f}" '
            f'fill="{fill}" rx="2"><title>{esc(lab)}: {esc(num(v))}</title></rect>'
        )
        if v:
            parts.append(
                f'<text x="{x + slot * 0.38:.1f}" y="{top + h - bh - 3:.1f}" font-size="10" '
                f'text-anchor="middle">{esc(num(v))}</text>'
            )
        if n <= 12 or i % math.ceil(n / 12) == 0:
            parts.append(
                f'<text x="{x + slot * 0.38:.1f}" y="{top + h + 14}" font-size="10.5" '
                f'text-anchor="middle">{esc(lab)}</text>'
            )
    parts.append(f'<line x1="{left}" x2="{left + w}" y1="{top + h}" y2="{top + h}" stroke="#8a93a3"/>')
    return _svg(width, height, "".join(parts), label)


def scatter_chart(points: Sequence[Sequence[float]], label: str, width: int = 560, height: int = 300) -> str:
    """Speed (y) against batch (x) per cell, on a sqrt scale; the diagonal is perfect agreement."""
    left, right, top, bottom = 50, 14, 12, 40
    w, h = width - left - right, height - top - bottom
    peak = _nice_max(max([max(p[0], p[1]) for p in points] + [1]))
    s = lambda v: math.sqrt(max(v, 0) / peak)  # noqa: E731
    parts = []
    for t in _sqrt_ticks(peak):
        x, y = left + w * s(t), top + h - h * s(t)
        parts.append(f'<line x1="{left}" x2="{left + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eef0f3"/>')
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + h}" stroke="#eef0f3"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="10.5" text-anchor="end">{esc(num(t, 1))}</text>')
        parts.append(
            f'<text x="{x:.1f}" y="{top + h + 14}" font-size="10.5" text-anchor="middle">{esc(num(t, 1))}</text>'
        )
    parts.append(
        f'<line x1="{left}" y1="{top + h}" x2="{left + w}" y2="{top}" stroke="#9aa2b1" stroke-dasharray="4 3"/>'
    )
    for b, sp, differs in sorted(points, key=lambda p: p[2]):
        x, y = left + w * s(b), top + h - h * s(sp)
        color, r, op = (CAUSE_COLORS["unexplained"], 3.2, 0.85) if differs else ("#2f6fb0", 2.4, 0.35)
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{color}" fill-opacity="{op}"/>')
    parts.append(
        f'<text x="{left + w / 2}" y="{height - 6}" font-size="11" text-anchor="middle">batch value (√ scale)</text>'
    )
    parts.append(
        f'<text x="12" y="{top + h / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 12 {top + h / 2})">speed value</text>'
    )
    return _svg(width, height, "".join(parts), label)


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
    from datetime import datetime

    return [
        have.get(b)
        or {
            "ingest_bucket": b,
            "time": datetime.fromtimestamp(b, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "speed": 0,
            "batch": 0,
            "drift": 0,
            "abs_error": 0,
            "cells": 0,
            "duplicates": 0,
        }
        for b in range(first, last + 1, bucket_s)
    ]


def drift_chart(series: Sequence[dict], label: str, width: int = 1140, height: int = 220) -> str:
    """Per ingest bucket: drift (speed − batch) as bars around zero; orange when duplicates explain it all."""
    left, right, top, bottom = 56, 12, 14, 36
    w, h = width - left - right, height - top - bottom
    drifts = [d["drift"] for d in series] or [0]
    lo, hi = min(0.0, min(drifts)), max(0.0, max(drifts))
    span = _nice_max(max(abs(lo), abs(hi))) if (lo or hi) else 1.0
    lo_v, hi_v = (-span if lo < 0 else 0.0), (span if hi > 0 or lo == 0 else 0.0)
    if lo_v == hi_v:
        hi_v = 1.0
    y_of = lambda v: top + h * (hi_v - v) / (hi_v - lo_v)  # noqa: E731
    parts = []
    for t in (lo_v, (lo_v + hi_v) / 2, hi_v, 0.0):
        y = y_of(t)
        parts.append(
            f'<line x1="{left}" x2="{left + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="{"#8a93a3" if t == 0 else "#eef0f3"}"/>'
        )
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="10.5" text-anchor="end">{esc(num(t, 1))}</text>')
    n = max(len(series), 1)
    slot = w / n
    for i, d in enumerate(series):
        x = left + i * slot
        bw = max(slot * 0.8, 1.0)
        y0, y1 = y_of(0), y_of(d["drift"])
        color = (
            "#e08a2c"
            if d["drift"] and abs(d["drift"] - d.get("duplicates", 0)) < 0.5
            else ("#3b82c4" if d["drift"] else "#cfd5de")
        )
        height_px = max(abs(y1 - y0), 1.0 if d["cells"] else 0.0)
        parts.append(
            f'<rect x="{x + slot * 0.1:.1f}" y="{min(y0, y1):.1f}" width="{bw:.1f}" height="{height_px:.1f}" fill="{color}">'
            f"<title>{esc(d['time'])}: drift {esc(num(d['drift']))}, duplicates {esc(num(d.get('duplicates', 0)))}, "
            f"{esc(num(d['cells']))} cells</title></rect>"
        )
    step = max(1, math.ceil(n / 10))
    for i in range(0, len(series), step):
        x = left + i * slot + slot / 2
        parts.append(
            f'<text x="{x:.1f}" y="{top + h + 16}" font-size="10.5" text-anchor="middle">'
            f"{esc(series[i]['time'][11:16])}</text>"
        )
    parts.append(
        f'<text x="{left + w / 2}" y="{height - 3}" font-size="11" text-anchor="middle">ingest bucket (UTC)</text>'
    )
    return _svg(width, height, "".join(parts), label)


def hll_chart(hll: dict, label: str, width: int = 560, height: int = 250) -> str:
    """Relative error in units of the bound, with the ±1×, ±2×, ±3× bands shaded."""
    left, right, top, bottom = 46, 10, 26, 44
    w, h = width - left - right, height - top - bottom
    bins = hll["histogram"]
    values = [b["cells"] for b in bins]
    n = len(values)
    slot = w / n
    # bins: [< -4] then 16 half-unit bins from -4 to +4, then [> +4]: x of a value v in bounds
    x_of = lambda v: left + slot * (1 + (v + 4) * 2)  # noqa: E731
    parts = []
    for k, shade in ((3, "#fbf3e6"), (2, "#f3f0e0"), (1, "#e6f4ec")):
        parts.append(
            f'<rect x="{x_of(-k):.1f}" y="{top}" width="{x_of(k) - x_of(-k):.1f}" height="{h}" fill="{shade}"/>'
        )
        for sgn in (-1, 1):
            parts.append(
                f'<text x="{x_of(sgn * k):.1f}" y="{top - 6}" font-size="10" text-anchor="middle">{"+" if sgn > 0 else "−"}{k}×</text>'
            )
    peak = max([math.log10(1 + v) for v in values] + [1e-9])
    for t in _log_ticks(peak):
        y = top + h - h * math.log10(1 + t) / peak
        parts.append(
            f'<line x1="{left}" x2="{left + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ffffff" stroke-opacity="0.7"/>'
        )
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="10.5" text-anchor="end">{esc(num(t, 0))}</text>')
    for i, v in enumerate(values):
        bh = h * math.log10(1 + v) / peak
        x = left + i * slot + slot * 0.1
        parts.append(
            f'<rect x="{x:.1f}" y="{top + h - bh:.1f}" width="{slot * 0.8:.1f}" height="{bh:.1f}" fill="#3b82c4">'
            f"<title>{esc(bins[i]['bin'])} × bound: {esc(num(v))} cells</title></rect>"
        )
    for v in range(-4, 5, 2):
        parts.append(f'<text x="{x_of(v):.1f}" y="{top + h + 14}" font-size="10.5" text-anchor="middle">{v:+d}</text>')
    parts.append(f'<line x1="{left}" x2="{left + w}" y1="{top + h}" y2="{top + h}" stroke="#8a93a3"/>')
    parts.append(
        f'<text x="{left + w / 2}" y="{height - 6}" font-size="11" text-anchor="middle">'
        f"relative error ÷ bound {100 * hll['bound']:.3f} % (cells, log scale)</text>"
    )
    return _svg(width, height, "".join(parts), label)


def cause_chart(summary: dict, label: str, width: int = 1140) -> str:
    """Per view, a horizontal bar per cause: cells whose difference it explains (all granularities)."""
    rows = [(view, cause, s["cells_by_cause"][cause]) for view, s in summary.items() for cause in CAUSE_LABELS]
    peak = max([r[2] for r in rows] + [1])
    row_h, left, right = 17, 440, 80
    height = 16 + row_h * len(rows) + 8 * len(summary)
    parts, y = [], 10
    for view, s in summary.items():
        parts.append(f'<text x="0" y="{y + 12}" font-size="12" font-weight="600">{esc(view[:34])}</text>')
        for cause in CAUSE_LABELS:
            cells = s["cells_by_cause"][cause]
            bw = (width - left - right) * cells / peak
            parts.append(
                f'<text x="{left - 8}" y="{y + 12}" font-size="11.5" text-anchor="end">{esc(CAUSE_LABELS[cause])}</text>'
            )
            parts.append(
                f'<rect x="{left}" y="{y + 2}" width="{max(bw, 0.0):.1f}" height="{row_h - 5}" fill="{CAUSE_COLORS[cause]}" rx="2"/>'
            )
            parts.append(f'<text x="{left + bw + 6:.1f}" y="{y + 12}" font-size="11">{esc(num(cells))} cells</text>')
            y += row_h
        parts.append(f'<line x1="0" x2="{width}" y1="{y + 3}" y2="{y + 3}" stroke="#eef0f3"/>')
        y += 8
    return _svg(width, height, "".join(parts), label)


# --- page -----------------------------------------------------------------------------------------


SHORT_CAUSES = {
    "duplicates_beyond_window": "duplicates beyond window",
    "accepted_by_one_layer": "one layer only",
    "sketch_approximation": "sketch",
    "late_events": "late events",
    "unexplained": "unexplained",
}


def _summary_table(report: dict) -> str:
    head = (
        "<tr><th class=l>view</th><th>cells</th><th>exact</th><th>exact after duplicates</th>"
        "<th>mean |err|</th><th>max |err|</th><th>MAPE</th><th>drift</th>"
        + "".join(f"<th>{esc(SHORT_CAUSES[c])}</th>" for c in CAUSE_LABELS)
        + "<th>ok</th></tr>"
    )
    rows = []
    for name, s in report["summary"].items():
        causes = "".join(
            f"<td>{signed(s['causes'][c])}</td>"
            if c != "late_events"
            else f"<td>{_measured(s['causes'][c], s['cells_by_cause'][c])}</td>"
            for c in CAUSE_LABELS
        )
        ok = '<span class="good">✓</span>' if s["ok"] else '<span class="bad">✗</span>'
        rows.append(
            f"<tr><td class=l><b>{esc(name)}</b><br><span class=note>at {esc(s['granularity'])}</span></td><td>{num(s['cells'])}</td>"
            f"<td>{pct(s['exact_share'])}</td><td>{pct(s['exact_share_after_duplicates'])}</td>"
            f"<td>{num(s['mean_abs_error'], 3)}</td><td>{num(s['max_abs_error'])}</td><td>{num(s['mape_percent'], 3)} %</td>"
            f"<td>{signed(s['drift'])}</td>{causes}<td>{ok}</td></tr>"
        )
    return f"<div class=scroll><table>{head}{''.join(rows)}</table></div>"


def _measured(amount, cells) -> str:
    if not amount and not cells:
        return '<span class="measured-zero">measured 0</span>'
    return f'<span class="measured-nonzero">{esc(num(amount))} in {esc(num(cells))} cells</span>'


def _cause_table(report: dict) -> str:
    head = (
        "<tr><th class=l>cause</th>"
        + "".join(f"<th>{esc(v).replace('_', '_<wbr>')}</th>" for v in report["summary"])
        + "<th class=l>how it is measured</th></tr>"
    )
    how = {
        "duplicates_beyond_window": f"copies arriving more than {report['settings']['dedupe_window_s']} s after the last copy "
        "the speed layer counted: it counts them again, the batch does not",
        "accepted_by_one_layer": "cells present in one layer only, duplicates aside (both layers run the same validator: expect 0)",
        "sketch_approximation": f"distinct views: sketch error within {report['settings']['sketch_tolerance']:g}× the HLL bound",
        "late_events": "what remains in cells holding events more than an hour late: the speed layer keys by ingest bucket, "
        "so lateness must cause no error",
        "unexplained": "anything else",
    }
    rows = []
    for cause, label in CAUSE_LABELS.items():
        cells = []
        for s in report["summary"].values():
            amount, n = s["causes"][cause], s["cells_by_cause"][cause]
            if cause == "late_events":
                detail = (
                    f'{_measured(amount, n)}<div class="note">{esc(num(s["late_cells"]))} late cells compared</div>'
                )
            else:
                detail = f"{signed(amount)}<div class='note'>{esc(num(n))} cells</div>"
            cells.append(f"<td>{detail}</td>")
        dot = f'<span class="pill" style="background:{CAUSE_COLORS[cause]}">&nbsp;</span>'
        rows.append(
            f"<tr><td class=l>{dot} {esc(label)}</td>{''.join(cells)}<td class='l note' style='white-space:normal;min-width:230px'>{esc(how[cause])}</td></tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>"


def _worst_keys(rows: list[dict]) -> str:
    if not rows:
        return '<p class="note">No key differs between the layers at this granularity.</p>'
    body = "".join(
        f"<tr><td class='l key' title='{esc(key_label(r['key']))}'>{esc(key_label(r['key']))}</td><td>{num(r['cells'])}</td>"
        f"<td>{num(r['abs_error'])}</td><td>{num(r['max_abs_error'])}</td><td>{signed(r['drift'])}</td>"
        f"<td class=l>{_causes_inline(r['causes'])}</td></tr>"
        for r in rows
    )
    return (
        "<table><tr><th class=l>key</th><th>cells</th><th>Σ |err|</th><th>max |err|</th><th>drift</th>"
        f"<th class=l>causes</th></tr>{body}</table>"
    )


def _worst_cells(rows: list[dict]) -> str:
    if not rows:
        return '<p class="note">Every cell agrees.</p>'
    body = "".join(
        f"<tr><td class='l key' title='{esc(key_label(r['key']))}'>{esc(key_label(r['key']))}</td><td>{esc(r['granularity'])}</td>"
        f"<td>{esc(r['event_bucket'][5:16].replace('T', ' '))}</td><td>{esc(r['ingest_bucket'][11:16])}</td>"
        f"<td>{num(r['batch'])}</td><td>{num(r['speed'])}</td><td>{signed(r['diff'])}</td>"
        f"<td>{num(r['recounts'])}</td><td>{num(r['late_records'])}</td><td class=l>{_causes_inline(r['causes'])}</td></tr>"
        for r in rows
    )
    return (
        "<table><tr><th class=l>key</th><th>gran.</th><th>event bucket</th><th>ingest</th><th>batch</th><th>speed</th>"
        f"<th>diff</th><th>recounts</th><th>late</th><th class=l>causes</th></tr>{body}</table>"
    )


def _causes_inline(causes: dict) -> str:
    if not causes:
        return '<span class="zero">–</span>'
    return " ".join(
        f'<span class="pill" style="background:{CAUSE_COLORS.get(c, "#777")}">{esc(CAUSE_LABELS.get(c, c))} '
        f"{esc(num(v))}</span>"
        for c, v in causes.items()
    )


def _granularity_table(view: dict) -> str:
    rows = []
    for g, f in view["granularities"].items():
        late = f["late"]
        rows.append(
            f"<tr><td class=l>{esc(g)}</td><td>{num(f['cells'])}</td><td>{pct(f['exact_share'])}</td>"
            f"<td>{pct(f['exact_share_after_duplicates'])}</td><td>{num(f['mean_abs_error'], 3)}</td>"
            f"<td>{num(f['max_abs_error'])}</td><td>{num(f['mape_percent'], 3)} %</td><td>{num(f['speed_total'])}</td>"
            f"<td>{num(f['batch_total'])}</td><td>{signed(f['drift'])}</td><td>{num(f['speed_only_cells'])} / "
            f"{num(f['batch_only_cells'])}</td><td>{num(late['cells'])} ({num(late['records'])} events)</td>"
            f"<td>{_measured(late['error'], f['causes']['late_events']['cells'])}</td></tr>"
        )
    return (
        "<div class=scroll><table><tr><th class=l>granularity</th><th>cells</th><th>exact</th><th>after duplicates</th><th>mean |err|</th>"
        "<th>max |err|</th><th>MAPE</th><th>Σ speed</th><th>Σ batch</th><th>drift</th><th>speed-only / batch-only</th>"
        f"<th>late cells</th><th>late-event error</th></tr>{''.join(rows)}</table></div>"
    )


def _hll_section(view: dict, fine: dict) -> str:
    hll = fine["hll"]
    by_size = "".join(
        f"<tr><td class=l>{esc(label)}</td><td>{num(v['cells'])}</td><td>{_percent(v['rms_relative_error'], 3)}</td></tr>"
        for label, v in hll["by_size"].items()
    )
    return f"""
      <h3>HyperLogLog relative error ({esc(fine_name(view))}) — bound 1.04/√{2 ** hll["lg_k"]} = {100 * hll["bound"]:.3f} %</h3>
      <div class="grid">
        <div class="chart"><div class="t">Relative error of the speed layer's sketches</div>
          <div class="s">against the exact distinct count of the copies the speed layer saw; shaded: ±1×, ±2×, ±3× the bound</div>
          {hll_chart(hll, f"{view['name']} HLL relative error")}</div>
        <div class="card" style="margin:0">
          <div class="kv">
            <div><span>cells with a sketch</span>{num(hll["cells"])}</div>
            <div><span>within 1× bound</span>{pct(hll["within_1x"])}</div>
            <div><span>within 2× bound</span>{pct(hll["within_2x"])}</div>
            <div><span>within 3× bound</span>{pct(hll["within_3x"])}</div>
            <div><span>mean relative error</span>{100 * hll["mean_relative_error"]:.4f} %</div>
            <div><span>RMS relative error</span>{100 * hll["rms_relative_error"]:.4f} %</div>
            <div><span>max |relative error|</span>{100 * hll["max_abs_relative_error"]:.3f} %</div>
          </div>
          <h3>By exact count</h3>
          <table><tr><th class=l>distinct values</th><th>cells</th><th>RMS relative error</th></tr>{by_size}</table>
          <p class="note">Small cells are held exactly by the sketch (its list mode); the bound is for large ones.</p>
        </div>
      </div>"""


def _percent(fraction, digits: int) -> str:
    return "–" if fraction is None else f"{100 * fraction:.{digits}f} %"


def fine_name(view: dict) -> str:
    return f"{view['name']} / {view['finest']}"


def _view_section(view: dict, bucket_s: int, window: dict | None = None) -> str:
    fine = view["granularities"][view["finest"]]
    name = view["name"]
    hist = fine["error_histogram"]
    keys = ", ".join(view["keys"])
    agg = view["aggregation"] + (f"({view['column']})" if view.get("column") else "")
    if not fine["cells"]:
        charts = '<p class="note">No cell of this view in the window.</p>'
    else:
        charts = f"""
      <div class="grid">
        <div class="chart"><div class="t">Error histogram</div><div class="s">cells by |speed − batch| ({
            esc(view["finest"])
        }, log scale)</div>
          {
            bar_chart(
                [h["bin"] for h in hist],
                [h["cells"] for h in hist],
                f"{name} error histogram",
                log=True,
                highlight=[i > 0 for i in range(len(hist))],
            )
        }</div>
        <div class="chart"><div class="t">Speed versus batch</div><div class="s">one point per cell; red: cells that differ</div>
          {scatter_chart(fine["scatter"], f"{name} speed versus batch")}</div>
      </div>
      <div class="chart" style="margin-top:14px"><div class="t">Drift over time</div>
        <div class="s">Σ speed − Σ batch per ingest bucket ({
            esc(view["finest"])
        }); orange: entirely duplicates beyond the window</div>
        {drift_chart(fill_buckets(fine["drift_over_time"], bucket_s, window), f"{name} drift over time")}
        {
            ""
            if any(d["drift"] for d in fine["drift_over_time"])
            else '<p class="note">No drift in any ingest bucket.</p>'
        }</div>"""
    hll = _hll_section(view, fine) if "hll" in fine else ""
    return f"""
    <section class="card" id="view-{esc(name)}">
      <h2 style="margin-top:0">{esc(name)} <span class="note">keys ({esc(keys)}) · {esc(agg)} · {esc(view["layout"])}</span></h2>
      {_granularity_table(view)}
      {charts}
      {hll}
      <h3>Worst keys ({esc(view["finest"])})</h3>{_worst_keys(fine["worst_keys"])}
      <h3>Worst cells ({esc(view["finest"])})</h3>{_worst_cells(fine["worst_cells"])}
    </section>"""


def render_html(report: dict) -> str:
    """The report as one self-contained HTML page (inline CSS and SVG, no script, no external URL)."""
    window = report["window"]
    speed = report.get("speed_layer", {})
    inputs = report.get("inputs", {})
    if report.get("ok"):
        banner = (
            '<div class="banner ok">Every difference between the layers is explained: duplicates beyond the '
            "de-duplication window and the sketches' approximation only.</div>"
        )
    else:
        items = "".join(f"<li>{esc(p)}</li>" for p in report.get("problems", []))
        banner = f'<div class="banner bad">Differences that are not explained<ul>{items}</ul></div>'
    caught = speed.get("caught_up")
    caught_text = (
        ("yes" if caught else "NO — rows may be missing")
        if caught is not None
        else "snapshot read " + esc(speed.get("snapshot_read", ""))
    )
    kv = [
        ("records ingested in the window", num(inputs.get("master_records_in_window"))),
        ("first copies (what the batch counts)", num(inputs.get("first_copies"))),
        ("duplicates within the window (both drop)", num(inputs.get("duplicate_copies_within_window"))),
        ("duplicates beyond the window (speed counts again)", num(inputs.get("duplicate_copies_beyond_window"))),
        ("late events (> 1 h)", num(inputs.get("late_records"))),
        ("realtime rows read", num(inputs.get("realtime_rows_read"))),
        ("speed layer past the cutoff", caught_text),
        ("ingest buckets past the realtime TTL (skipped)", num(inputs.get("skipped_expired_ingest_buckets"))),
    ]
    if inputs.get("key_filter"):
        kv.append(("cells outside the key filter", num(inputs.get("filtered_out_cells"))))
    kv_html = "".join(f"<div><span>{esc(k)}</span>{v}</div>" for k, v in kv)
    st = report.get("settings", {})
    sections = "".join(
        _view_section(v, int(report.get("settings", {}).get("ingest_bucket_s") or 0), window)
        for v in report["views"].values()
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Accuracy report {esc(report["id"])}</title><style>{CSS}</style></head>
<body><main>
  <h1>Accuracy report: speed layer versus batch layer</h1>
  <div class="meta">ingest window <b>{esc(window["start"])}</b> → <b>{esc(window["end"])}</b> ·
    batch version <b>{esc(report.get("version") if report.get("version") is not None else "–")}</b> · run <b>{esc(report.get("run_id"))}</b> ·
    created {esc(report.get("created"))} · report {esc(report["id"])}<br>
    ingest buckets {esc(st.get("ingest_bucket_s"))} s · de-duplication window {esc(st.get("dedupe_window_s"))} s ·
    HLL lg k {esc(st.get("hll_lg_k"))} (bound {100 * st.get("hll_bound", 0):.3f} %) · late means more than {esc(st.get("late_after_s"))} s</div>
  {banner}
  <div class="card"><div class="kv">{kv_html}</div></div>
  <h2>Summary per view</h2>
  <div class="card">{_summary_table(report)}
    <p class="note">Figures at each view's finest granularity; a cell is (key, event bucket, ingest bucket). Drift is Σ speed − Σ batch.
    Cause amounts are signed shares of the drift, in the view's units.</p></div>
  <h2>Where the differences come from</h2>
  <div class="card">{_cause_table(report)}
    <div class="chart" style="margin-top:12px"><div class="t">Cells per cause, all granularities</div>
    {cause_chart(report["summary"], "cells per cause")}</div></div>
  {sections}
</main></body></html>
"""
