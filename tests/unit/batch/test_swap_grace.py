"""A verified run swaps only while retention (in any process) still keeps its tables: the grace is
checked right before the compare-and-set. It was checked before the speed layer's marker was read
(WebHDFS, 10 s per endpoint tried), so a slow read near the end of the grace let the pointer name
tables retention had dropped meanwhile. No service: the version store is a stand-in."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from batch_layer import job
from stores.batch_writer import VerificationError


def test_the_grace_is_checked_after_the_slow_reads_right_before_the_swap(settings, monkeypatch):
    clock = {"ms": 0}
    monkeypatch.setattr(job, "time", SimpleNamespace(time=lambda: clock["ms"] / 1000))
    swaps: list = []
    run = {
        "state": "verified",
        "views": ["page_views"],
        "full": True,
        "cutoff_ms": 60_000,
        "run_id": "run-5",
        "based_on": 0,
        "started_ms": 0,
        "verified_ms": 0,
    }
    store = SimpleNamespace(runs=lambda: {5: run}, pointer=lambda: None, swap=lambda *a: swaps.append(a))
    monkeypatch.setattr(job, "version_store", lambda s: store)
    monkeypatch.setattr(job, "_tables_kept", lambda *a: None)
    monkeypatch.setattr(job, "check_unmoved", lambda *a: None)

    def slow_marker_read(s):  # the grace runs out while the marker is read
        clock["ms"] += settings.batch.retention_grace_s * 1000
        return ["page_views"]

    monkeypatch.setattr(job, "_speed_layer_maintains", slow_marker_read)
    with pytest.raises(VerificationError, match="retention may have dropped its tables"):
        job.swap_version(settings, 5)
    assert swaps == [], "nothing swapped"
