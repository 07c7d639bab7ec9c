"""A small hand-made window for the report's pure parts: both sides of a few cells, compared and
assembled into a report document the way reports.build does it (no service, no Spark)."""

from __future__ import annotations

import pytest

from definitions.view_loading import load_views
from definitions.views import GRANULARITIES, key_text
from reports.build import Comparison, assemble
from reports.cells import BatchCell, RealtimeSnapshot
from reports.compare import match_cells

T0 = 1_767_261_600  # 2026-01-01T10:00:00Z
HOSTILE = "/<img src=x onerror=alert(1)>"


def cell_id(view: str, granularity: str, key: list[str], ingest_s: int) -> tuple[str, str, str, int, int]:
    size = GRANULARITIES[granularity]
    return (view, granularity, key_text(key), ingest_s // size * size, ingest_s)


def sides(settings) -> tuple[dict, dict]:
    """Realtime values and batch cells over ten ingest buckets from T0, every view and granularity:
    exact cells, one key re-sent beyond the window (the hostile URL), sketches a little off."""
    bucket = settings.ingest_bucket_s
    realtime: dict = {}
    batch: dict = {}
    for view in load_views(settings):
        for granularity in view.granularities:
            for i in range(12):
                key = [HOSTILE if i == 0 else f"/p{i}"] if view.keys == ("url",) else ["DE", f"d{i}"]
                ingest = T0 + (i % 10) * bucket
                n = 10 + i
                recounts = 2 if i == 0 else 0
                late = 1 if i % 4 == 0 else 0
                cid = cell_id(view.name, granularity, key, ingest)
                batch[cid] = BatchCell(n, n + recounts, n, recounts, 0, late)
                realtime[cid] = n + recounts if view.additive else (n + recounts) * (1.01 if i % 2 else 0.99)
    return realtime, batch


def comparison(settings) -> Comparison:
    realtime, batch = sides(settings)
    views = list(load_views(settings))
    start, end = T0 * 1000, (T0 + 10 * settings.ingest_bucket_s) * 1000
    cells, skipped = match_cells(views, realtime, batch, start, end, ttl_floor_s=0)
    snapshot = RealtimeSnapshot(start, end, end + 60_000, realtime, len(realtime))
    inputs = {"master_records_in_window": 1000, "first_copies": 990, "duplicate_copies_beyond_window": 2}
    return Comparison(start, end, views, cells, skipped, snapshot, inputs, {"caught_up": True})


@pytest.fixture
def report(settings) -> dict:
    return assemble(settings, comparison(settings), 7, f"run-{HOSTILE}")
