"""Why a cell differs: its difference (speed − batch) split into causes, in the order of CAUSES:

duplicates_beyond_window  copies of an event that arrived more than speed.dedupe_window_s after
                          the last copy the speed layer counted: the speed layer counts them
                          again, the batch does not (counted per cell with Spark: reports.read).
accepted_by_one_layer     a cell one layer has and the other has not, duplicates aside.
sketch_approximation      distinct views: the sketch's error, within SKETCH_TOLERANCE × the
                          HLL bound 1.04 / sqrt(2^lg_k).
late_events               what is left in cells holding late events (event time more than an
                          hour before ingest time). The speed layer keys by ingest bucket, so
                          lateness must cause no error: this is a measured figure, expected 0.
unexplained               anything else.
"""

from __future__ import annotations

from definitions.views import View
from reports.cells import Cell, significant, tolerance

CAUSES = ("duplicates_beyond_window", "accepted_by_one_layer", "sketch_approximation", "late_events", "unexplained")
# Causes that are no error of either layer; any other one makes a report not ok.
PROBLEMS = ("accepted_by_one_layer", "late_events", "unexplained")


def attribute(view: View, cell: Cell) -> None:
    """Split the cell's difference (speed − batch) into causes, in the order of CAUSES: sets
    `cell.parts` and `cell.not_recounted`."""
    b, e, s = cell.batch.batch, cell.batch.expected, cell.speed
    diff, dup = s - b, e - b
    parts: dict[str, float] = {}
    if view.additive:
        # Copies beyond the window are candidates: the speed layer keeps a counted copy's
        # de-duplication state until its watermark passes it, a little longer than the window, so
        # a candidate may still have been dropped. A difference between 0 and the candidates' total
        # is theirs; whatever the candidates do not account for falls through to the other causes. A
        # difference of the other sign recounted none of them: it is the other causes' alone.
        if not dup or diff * dup <= 0:
            dup_part = 0.0
        else:
            dup_part = diff if abs(diff) <= abs(dup) else dup
    elif dup and abs(s - e) > tolerance(e) and abs(diff) <= tolerance(b):
        dup_part = 0.0  # the sketch agrees with the batch: the candidates were not counted again
    else:
        dup_part = dup
    cell.not_recounted = dup - dup_part
    if dup_part:
        parts["duplicates_beyond_window"] = dup_part
    rest = diff - dup_part
    if rest:
        if significant(rest, view.additive) and cell.speed_present != cell.expected_present:
            parts["accepted_by_one_layer"] = rest
        elif not view.additive and abs(rest) <= tolerance(e if dup_part else b):
            parts["sketch_approximation"] = rest
        elif cell.batch.late_records:
            parts["late_events"] = rest
        else:
            parts["unexplained"] = rest
    cell.parts = parts
