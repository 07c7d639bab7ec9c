"""Both sides matched cell by cell, and the figures of a view: pure functions over small data
(no I/O, no Spark, no clock: the caller says which ingest buckets are past the realtime TTL)."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from definitions.times import iso_ms
from definitions.views import GRANULARITIES, HLL_LG_K, View
from reports.attribute import CAUSES, PROBLEMS, attribute
from reports.cells import HLL_BOUND, BatchCell, Cell, CellId, significant

MAX_DIFFERENCES = 2_000  # differing cells listed per view
MAX_SCATTER = 1_500
# Entries of a granularity's drift over time a report stores: past it, neighbouring ingest buckets
# share one (merge_buckets), or the report grows with its window (a week of minute buckets is 10,080).
MAX_DRIFT_POINTS = 1_000
ERROR_BINS = ((0.5, "0"), (1.5, "1"), (2.5, "2"), (5.5, "3–5"), (10.5, "6–10"), (100.5, "11–100"), (math.inf, ">100"))
HLL_BINS = [x / 2 for x in range(-8, 9)]  # edges in units of the bound: -4 … 4


# --- matching -------------------------------------------------------------------------------------


def match_cells(
    views: Iterable[View],
    realtime: Mapping[CellId, float],
    batch: Mapping[CellId, BatchCell],
    start_ms: int,
    end_ms: int,
    ttl_floor_s: int,
    cleaned_s: Mapping[str, int] | None = None,
    expired: set[int] | None = None,
    maintained_s: Mapping[str, int] | None = None,
) -> tuple[dict[str, list[Cell]], dict[str, int]]:
    """The cells of both sides in the window's ingest buckets, matched and attributed, per view;
    and how many ingest buckets older than `ttl_floor_s` (the realtime rows' TTL; with `expired`,
    those whose batch cells were not computed), and of a view below `cleaned_s[view]` (where the
    realtime clean-up deleted its rows), and of a view below `maintained_s[view]` (before the speed
    layer maintained it: reports.build.maintained_from_s), were left out."""
    by_name = {v.name: v for v in views}
    lo, hi = start_ms // 1000, end_ms // 1000
    expired_ingest_buckets: set[int] = {b for b in expired or () if lo <= b < hi and b < ttl_floor_s}
    cleaned_ingest_buckets: set[tuple[str, int]] = set()
    unmaintained_ingest_buckets: set[tuple[str, int]] = set()
    out: dict[str, list[Cell]] = {name: [] for name in by_name}
    for cell_id in sorted(set(batch) | set(realtime)):
        name, granularity, key, event_bucket, ingest_bucket = cell_id
        view = by_name.get(name)
        if view is None or granularity not in view.granularities or not lo <= ingest_bucket < hi:
            continue
        if ingest_bucket < ttl_floor_s:
            expired_ingest_buckets.add(ingest_bucket)
            continue
        if cleaned_s and ingest_bucket < cleaned_s.get(name, 0):
            cleaned_ingest_buckets.add((name, ingest_bucket))
            continue
        if maintained_s and ingest_bucket < maintained_s.get(name, 0):
            unmaintained_ingest_buckets.add((name, ingest_bucket))
            continue
        b = batch.get(cell_id, BatchCell())
        present = cell_id in realtime
        if not present and b.first_records + b.recounts == 0:
            continue  # only copies both layers drop: no cell on either side
        cell = Cell(name, granularity, key, event_bucket, ingest_bucket, realtime.get(cell_id, 0.0), present, b)
        attribute(view, cell)
        out[name].append(cell)
    return out, {
        "expired_ingest_buckets": len(expired_ingest_buckets),
        "cleaned_ingest_buckets": len(cleaned_ingest_buckets),
        "unmaintained_ingest_buckets": len(unmaintained_ingest_buckets),
    }


# --- figures --------------------------------------------------------------------------------------


def _r(x: float, digits: int = 4) -> float:
    return round(float(x), digits)


def _exact(view: View, cell: Cell) -> bool:
    return not significant(cell.diff, view.additive)


def _exact_after_duplicates(view: View, cell: Cell) -> bool:
    return not significant(cell.diff - cell.parts.get("duplicates_beyond_window", 0.0), view.additive)


def granularity_figures(view: View, cells: list[Cell]) -> dict:
    n = len(cells)
    errors = [abs(c.diff) for c in cells]
    exact = sum(1 for c in cells if _exact(view, c))
    pct = [abs(c.diff) / c.batch.batch for c in cells if c.batch.batch > 0]
    causes = {cause: {"cells": 0, "amount": 0.0} for cause in CAUSES}
    for c in cells:
        for cause, amount in c.parts.items():
            if significant(amount, view.additive) or cause == "duplicates_beyond_window":
                causes[cause]["cells"] += 1
            causes[cause]["amount"] += amount
    for cause_figures in causes.values():
        cause_figures["amount"] = _r(cause_figures["amount"])
    late = [c for c in cells if c.batch.late_records]
    histogram = [0] * len(ERROR_BINS)
    for err in errors:
        histogram[next(i for i, (edge, _) in enumerate(ERROR_BINS) if err < edge)] += 1
    figures: dict[str, Any] = {
        "cells": n,
        "exact_cells": exact,
        "exact_share": _r(exact / n) if n else None,
        "exact_share_after_duplicates": _r(sum(1 for c in cells if _exact_after_duplicates(view, c)) / n)
        if n
        else None,
        "mean_abs_error": _r(sum(errors) / n) if n else 0.0,
        "max_abs_error": _r(max(errors)) if n else 0.0,
        "mape_percent": _r(100 * sum(pct) / len(pct)) if pct else None,  # no cell the batch counted
        "speed_total": _r(sum(c.speed for c in cells)),
        "batch_total": _r(sum(c.batch.batch for c in cells)),
        "drift": _r(sum(c.diff for c in cells)),
        "speed_only_cells": sum(1 for c in cells if c.speed_present and not c.batch_present),
        "batch_only_cells": sum(1 for c in cells if c.batch_present and not c.speed_present),
        "duplicate_copies_beyond_window": sum(c.batch.recounts for c in cells),
        "duplicate_copies_within_window": sum(c.batch.dropped for c in cells),
        "beyond_window_candidates_not_recounted": _r(sum(c.not_recounted for c in cells)),
        "late": {
            "cells": len(late),
            "records": sum(c.batch.late_records for c in late),
            "cells_exact_after_duplicates": sum(1 for c in late if _exact_after_duplicates(view, c)),
            "error": causes["late_events"]["amount"],
        },
        "causes": causes,
        "error_histogram": [{"bin": label, "cells": count} for (_, label), count in zip(ERROR_BINS, histogram)],
        "drift_over_time": merge_buckets(drift_over_time(cells), MAX_DRIFT_POINTS),
        "worst_keys": worst_keys(view, cells),
        "worst_cells": [
            cell_doc(c) for c in sorted(cells, key=lambda c: -abs(c.diff))[:15] if significant(c.diff, view.additive)
        ],
        "scatter": scatter(view, cells),
    }
    if view.aggregation == "distinct":
        figures["hll"] = hll_figures(cells)
    return figures


def drift_over_time(cells: list[Cell]) -> list[dict]:
    """Per ingest bucket: Σ speed, Σ batch, their drift, Σ |error|, cells, and the duplicates' share."""
    over_time: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0, 0.0])
    for c in cells:
        t = over_time[c.ingest_bucket]
        t[0] += c.speed
        t[1] += c.batch.batch
        t[2] += abs(c.diff)
        t[3] += 1
        t[4] += c.parts.get("duplicates_beyond_window", 0.0)
    return [
        {
            "ingest_bucket": b,
            "time": iso_ms(b * 1000),
            "speed": _r(t[0]),
            "batch": _r(t[1]),
            "drift": _r(t[0] - t[1]),
            "abs_error": _r(t[2]),
            "cells": t[3],
            "duplicates": _r(t[4]),
        }
        for b, t in sorted(over_time.items())
    ]


# What merge_buckets adds up when neighbouring buckets share one entry.
_SUMMED = ("speed", "batch", "abs_error", "cells")


def merge_buckets(series: Sequence[dict], limit: int = 400) -> list[dict]:
    """At most `limit` entries: past it, each run of neighbouring buckets becomes one entry, named by
    its first bucket, with the sums of its counts and the drift (and duplicates) of its bucket of
    largest drift, so drifts of opposite signs do not cancel out of sight (a chart of one bar per
    bucket grew with the report's window: 30 MB of SVG for 1 s buckets over two days). A merged
    entry's drift is that bucket's, so it is not its speed − batch."""
    if len(series) <= limit:
        return list(series)
    size = -(-len(series) // limit)
    merged = []
    for at in range(0, len(series), size):
        group = series[at : at + size]
        worst = max(group, key=lambda d: abs(d.get("drift", 0)))
        merged.append(
            {
                **group[0],
                **{key: _r(sum(d.get(key, 0) for d in group)) for key in _SUMMED if key != "cells"},
                "cells": sum(d.get("cells", 0) for d in group),
                "drift": worst.get("drift", 0),
                "duplicates": worst.get("duplicates", 0),
                "buckets": sum(d.get("buckets", 1) for d in group),  # how many buckets share the entry
            }
        )
    return merged


def hll_figures(cells: list[Cell]) -> dict:
    """The sketch's relative error against the exact count of what it saw (first copies and recounts)."""
    rel = [(c.speed - c.batch.expected) / c.batch.expected for c in cells if c.speed_present and c.batch.expected > 0]
    sizes: dict[str, list[float]] = {"1–9": [], "10–99": [], "100–999": [], "≥1000": []}
    for c in cells:
        if c.speed_present and c.batch.expected > 0:
            e = c.batch.expected
            label = "1–9" if e < 10 else "10–99" if e < 100 else "100–999" if e < 1000 else "≥1000"
            sizes[label].append((c.speed - e) / e)
    n = len(rel)
    z = [r / HLL_BOUND for r in rel]
    counts = [0] * (len(HLL_BINS) + 1)  # below -4, the 16 bins, above 4
    for v in z:
        counts[sum(1 for edge in HLL_BINS if v >= edge)] += 1
    labels = ["< −4"] + [f"{a:+.1f}…{b:+.1f}" for a, b in zip(HLL_BINS, HLL_BINS[1:])] + ["> +4"]
    return {
        "bound": _r(HLL_BOUND, 6),
        "lg_k": HLL_LG_K,
        "cells": n,
        "within_1x": _r(sum(1 for v in z if abs(v) <= 1) / n) if n else None,
        "within_2x": _r(sum(1 for v in z if abs(v) <= 2) / n) if n else None,
        "within_3x": _r(sum(1 for v in z if abs(v) <= 3) / n) if n else None,
        "mean_relative_error": _r(sum(rel) / n, 6) if n else 0.0,
        "rms_relative_error": _r(math.sqrt(sum(r * r for r in rel) / n), 6) if n else 0.0,
        "max_abs_relative_error": _r(max(abs(r) for r in rel), 6) if n else 0.0,
        "histogram": [{"bin": label, "cells": count} for label, count in zip(labels, counts)],
        "by_size": {
            label: {
                "cells": len(v),
                "rms_relative_error": _r(math.sqrt(sum(r * r for r in v) / len(v)), 6) if v else None,
            }
            for label, v in sizes.items()
        },
    }


def cell_doc(c: Cell) -> dict:
    return {
        "granularity": c.granularity,
        "key": json.loads(c.key),
        "event_bucket": iso_ms(c.event_bucket * 1000),
        "ingest_bucket": iso_ms(c.ingest_bucket * 1000),
        "speed": _r(c.speed),
        "batch": _r(c.batch.batch),
        "diff": _r(c.diff),
        "causes": {k: _r(v) for k, v in c.parts.items()},
        "recounts": c.batch.recounts,
        "late_records": c.batch.late_records,
    }


def worst_keys(view: View, cells: list[Cell], limit: int = 10) -> list[dict]:
    keys: dict[str, dict] = {}
    for c in cells:
        k = keys.setdefault(
            c.key,
            {
                "key": json.loads(c.key),
                "cells": 0,
                "abs_error": 0.0,
                "max_abs_error": 0.0,
                "drift": 0.0,
                "causes": defaultdict(float),
            },
        )
        k["cells"] += 1
        k["abs_error"] += abs(c.diff)
        k["max_abs_error"] = max(k["max_abs_error"], abs(c.diff))
        k["drift"] += c.diff
        for cause, amount in c.parts.items():
            k["causes"][cause] += amount
    ranked = sorted(
        (k for k in keys.values() if significant(k["abs_error"], view.additive)),
        key=lambda k: (-k["abs_error"], str(k["key"])),
    )[:limit]
    return [
        {
            **k,
            "abs_error": _r(k["abs_error"]),
            "max_abs_error": _r(k["max_abs_error"]),
            "drift": _r(k["drift"]),
            "causes": {c: _r(v) for c, v in k["causes"].items()},
        }
        for k in ranked
    ]


def scatter(view: View, cells: list[Cell]) -> list[list[float]]:
    """[batch, speed, differs] points: every differing cell (up to a cap) and an even sample of the rest."""
    differing = [c for c in cells if significant(c.diff, view.additive)]
    same = [c for c in cells if not significant(c.diff, view.additive)]
    differing.sort(key=lambda c: -abs(c.diff))
    differing = differing[: MAX_SCATTER * 2 // 3]
    room = MAX_SCATTER - len(differing)
    step = max(1, math.ceil(len(same) / room)) if room > 0 else len(same) + 1
    same.sort(key=lambda c: (c.batch.batch, c.key, c.event_bucket, c.ingest_bucket))
    return [
        [_r(c.batch.batch, 2), _r(c.speed, 2), 1 if significant(c.diff, view.additive) else 0]
        for c in differing + same[::step]
    ]


def view_report(view: View, cells: list[Cell]) -> dict:
    """A view's section of the report: its figures per granularity and its differing cells."""
    by_granularity = {g: [c for c in cells if c.granularity == g] for g in view.granularities}
    granularities = {g: granularity_figures(view, cs) for g, cs in by_granularity.items()}
    finest = min(view.granularities, key=lambda g: GRANULARITIES[g])
    differing = sorted((c for c in cells if significant(c.diff, view.additive)), key=lambda c: -abs(c.diff))
    return {
        "name": view.name,
        "keys": list(view.keys),
        "aggregation": view.aggregation,
        "column": view.column,
        "layout": view.layout,
        "additive": view.additive,
        "description": view.description,
        "finest": finest,
        "granularities": granularities,
        "differences": [cell_doc(c) for c in differing[:MAX_DIFFERENCES]],
        "differences_total": len(differing),
    }


def view_summary(view: View, details: dict) -> dict:
    """The short per-view line: at the finest granularity; cell counts of the causes over all of them."""
    fine = details["granularities"][details["finest"]]
    cells_by_cause = {
        cause: sum(g["causes"][cause]["cells"] for g in details["granularities"].values()) for cause in CAUSES
    }
    summary = {
        "granularity": details["finest"],
        "cells": fine["cells"],
        "exact_share": fine["exact_share"],
        "exact_share_after_duplicates": fine["exact_share_after_duplicates"],
        "drift": fine["drift"],
        "mean_abs_error": fine["mean_abs_error"],
        "max_abs_error": fine["max_abs_error"],
        "mape_percent": fine["mape_percent"],
        "causes": {cause: fine["causes"][cause]["amount"] for cause in CAUSES},
        "cells_by_cause": cells_by_cause,
        "late_cells": fine["late"]["cells"],
        "ok": all(cells_by_cause[c] == 0 for c in PROBLEMS),
    }
    if view.aggregation == "distinct":
        summary["hll_within_3x_bound"] = fine["hll"]["within_3x"]
    return summary
