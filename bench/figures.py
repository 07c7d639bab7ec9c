"""Small helpers the benchmark scripts share: percentiles, number formatting, list arguments, logging.

The scripts run as files (`python bench/<name>.py`), so they import this module as `figures`.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from definitions.logs import configure


def configure_logging(*quiet: str) -> None:
    """The platform's one logging set-up (definitions.logs), as a person at a terminal reads it: the
    drivers log warnings and worse only, and so do the loggers named in `quiet` (`infra`: the stack's
    own lines while a benchmark restarts a service)."""
    configure("bench", fmt="short")
    for name in quiet:
        logging.getLogger(name).setLevel(logging.WARNING)


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def fmt(value, digits: int = 0) -> str:
    """`value` with thousands separators and `digits` decimals; "-" for None."""
    return "-" if value is None else f"{value:,.{digits}f}"


def int_list(text: str) -> list[int]:
    """A comma-separated list of integers ("500,1_000,2000")."""
    return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]


def emit(result: dict, text: str, json_path: Path | None) -> None:
    """Print a benchmark's report; write its result as JSON too when asked (`--json`)."""
    sys.stdout.write(text)
    if json_path:
        json_path.write_text(json.dumps(result, indent=2))
