"""A micro-batch that dropped rows as later than the watermark records them, with the watermark it
ran with, for the serving layer (no service: the progress is Spark's shape, the record counted)."""

from __future__ import annotations

from types import SimpleNamespace

from definitions.settings import Settings
from speed_layer.job import late_drops_recorder


def progress(dropped: int, watermark: str | None):
    ops = [SimpleNamespace(numRowsDroppedByWatermark=dropped), SimpleNamespace(numRowsDroppedByWatermark=0)]
    return SimpleNamespace(stateOperators=ops, eventTime={"watermark": watermark} if watermark else {})


def test_a_batch_that_dropped_late_rows_records_them_with_its_watermark(monkeypatch):
    from stores import checkpoints

    recorded = []
    monkeypatch.setattr(checkpoints, "record_late_drops", lambda _s, below, rows: recorded.append((below, rows)))
    record = late_drops_recorder(Settings())
    record(progress(0, "2026-11-29T04:00:00.000Z"))
    record(progress(3, None))  # no watermark yet: nothing can have been dropped as late
    assert recorded == []
    record(progress(5, "2026-11-29T04:00:00.000Z"))
    assert recorded == [(1_795_924_800_000, 5)]
    monkeypatch.setattr(checkpoints, "record_late_drops", lambda *_: (_ for _ in ()).throw(OSError("hdfs away")))
    assert record(progress(1, "2026-11-29T04:00:00.000Z")) == {}, "a failed record does not stop the listener"
    assert record(progress(2, "2026-11-29T04:01:00.000Z")) == {}
    monkeypatch.setattr(checkpoints, "record_late_drops", lambda _s, below, rows: recorded.append((below, rows)))
    record(progress(0, "2026-11-29T04:02:00.000Z"))  # HDFS back: what could not be recorded is, at the next batch
    assert recorded == [(1_795_924_800_000, 5), (1_795_924_860_000, 3)]
    record(progress(0, "2026-11-29T04:03:00.000Z"))
    assert len(recorded) == 2, "recorded once"
