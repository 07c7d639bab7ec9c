"""The archiver's completeness marker expects every partition `events` has when it is published:
partitions added to a running stack are waited for, never left out (no services needed)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from definitions.settings import Settings
from ingest import archiver
from stores import completeness
from stores.completeness import PartitionProgress


def progress(batch_id: int, end: dict[int, int]):
    offsets = json.dumps({"events": {str(p): o for p, o in end.items()}})
    return SimpleNamespace(batchId=batch_id, sources=[SimpleNamespace(endOffset=offsets)])


def test_a_partition_added_while_the_archiver_runs_holds_completeness_back(monkeypatch):
    settings = Settings()
    published: list[completeness.Completeness] = []
    counts = iter([4, 6])  # two partitions added between the batches
    monkeypatch.setattr(
        completeness,
        "progress_from_end_offsets",
        lambda _s, end: {p: PartitionProgress(o, 1_000 * o) for p, o in end.items()},
    )
    monkeypatch.setattr(completeness, "publish", lambda _s, marker: published.append(marker))
    hook = archiver.completeness_hook(settings, lambda: next(counts))

    hook(progress(1, {0: 5, 1: 6, 2: 7, 3: 8}))
    assert published[-1].complete_before_ms == 5_000
    # Spark has not read the new partitions yet: their records are not archived, whatever the old ones say.
    hook(progress(2, {0: 9, 1: 9, 2: 9, 3: 9}))
    assert published[-1].expected_partitions == 6
    assert published[-1].complete_before_ms is None
