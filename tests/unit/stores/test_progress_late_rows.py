"""Rows a stateful operator drops as later than the watermark are counted and said, never silent
(no services needed): the speed layer's watermark is on ingest time, so none is late in steady
state, but a catch-up whose partitions advance unevenly can leave some behind it."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

from definitions.settings import Settings
from stores import health
from stores.progress import ProgressFile
from tests.unit.stores.test_progress_publish import batch as batch_of


def batch(n: int, dropped: list[int]) -> SimpleNamespace:
    progress = batch_of(n)
    progress.stateOperators = [
        SimpleNamespace(
            numRowsTotal=10, numRowsDroppedByWatermark=d, allUpdatesTimeMs=1, allRemovalsTimeMs=1, commitTimeMs=1
        )
        for d in dropped
    ]
    return progress


def test_rows_dropped_by_the_watermark_are_counted_logged_and_shown(tmp_path, monkeypatch, caplog):
    settings = Settings(state_dir=tmp_path)
    progress = ProgressFile(settings, "speed-layer")
    progress.started("q1", "speed-views")
    progress.progress(batch(1, [0, 0]))
    with caplog.at_level(logging.WARNING):
        progress.progress(batch(2, [3, 4]))
        progress.progress(batch(3, [5, 0]))
    doc = json.loads(progress.path.read_text())
    assert doc["queries"]["speed-views"]["dropped_late"] == 5
    assert doc["totals"]["dropped_late"] == 12
    assert "batch 2: 7 rows later than the watermark dropped" in caplog.text

    monkeypatch.setattr("stores.progress.read_progress", lambda _s, _job: doc)
    monkeypatch.setattr("stores.progress.require_progressing", lambda *_a: None)
    assert "12 rows dropped as later than the watermark since start" in health.speed_layer(settings)
