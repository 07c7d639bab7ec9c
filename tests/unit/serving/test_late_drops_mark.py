"""Answers learn of rows the speed layer dropped as late as soon as the realtime store's late-drops
mark moves (stores.realtime_writes.LATE_DROPS_WRITER), not at the next read of the checkpoint
marker a minute later (no services: the realtime store in memory, the record on HDFS a function)."""

from __future__ import annotations

import pytest

from stores.realtime_writes import LATE_DROPS_WRITER, late_drops_mark
from tests.support.polling import wait_for
from tests.unit.serving.test_speed_cache import BUCKET, CUTOFF_MS, HOUR, _serving

DROPPED = (CUTOFF_MS + HOUR * 1000, 7)  # rows dropped after the batch cutoff: not in any answer


def _provenance(serving):
    view = next(v for v in serving.views if v.name == "page_views")
    start = CUTOFF_MS // 1000 - 2 * HOUR
    return serving.series(view, {"url": "/a"}, start, start + 10 * HOUR, "hour").provenance


@pytest.mark.parametrize("cache_mib", [32, 0])
def test_a_moved_late_drops_mark_flags_answers_at_the_next_check(tmp_path, monkeypatch, cache_mib):
    from stores import checkpoints

    record: list = [None]
    reads = []

    def read_late_drops(_settings):
        reads.append(record[0])
        return record[0]

    monkeypatch.setattr(checkpoints, "read_late_drops", read_late_drops)
    serving, store = _serving(tmp_path, speed_cache_mib=cache_mib)
    store.write(BUCKET, 4)
    assert _provenance(serving).complete
    record[0] = DROPPED  # the speed layer records the drops on HDFS, then moves the mark
    store.marks[LATE_DROPS_WRITER] = 1
    provenance = wait_for(
        lambda: None if (p := _provenance(serving)).complete else p,
        "the late drops to flag the answer",
        timeout_s=2,
        interval_s=0.005,
    )
    assert "7 rows" in provenance.reasons[0] and "later than its watermark" in provenance.reasons[0]
    before = len(reads)
    for _ in range(5):
        assert not _provenance(serving).complete
    store.write(BUCKET, 5)  # other writes move the marks too: the record is read only when its own mark moves
    marks_read = store.mark_reads
    wait_for(
        lambda: _provenance(serving) and store.mark_reads > marks_read, "the marks read again", 2, interval_s=0.005
    )
    assert len(reads) == before


def test_a_record_that_cannot_be_read_when_the_mark_moves_is_read_again_later(tmp_path, monkeypatch):
    from serving_layer import speed_state
    from stores import checkpoints

    clock = [1_000.0]
    monkeypatch.setattr(speed_state.time, "monotonic", lambda: clock[0])
    outcomes: list = [OSError("hdfs away"), DROPPED]
    reads = []

    def read_late_drops(_settings):
        found = outcomes[min(len(reads), 1)]
        reads.append(found)
        if isinstance(found, Exception):
            raise found
        return found

    monkeypatch.setattr(checkpoints, "read_late_drops", read_late_drops)
    serving, store = _serving(tmp_path)
    store.marks[LATE_DROPS_WRITER] = 1
    serving.speed.notice_marks(frozenset(store.marks.items()))
    assert serving.speed.late_drops is None, "the failed read leaves the last record"
    serving.speed.notice_marks(frozenset(store.marks.items()))
    assert len(reads) == 1, "not read again at once: HDFS is not asked at every check while it is away"
    clock[0] += speed_state.LATE_DROPS_RETRY_S + 1
    serving.speed.notice_marks(frozenset(store.marks.items()))
    assert serving.speed.late_drops == DROPPED


def test_the_late_drops_mark_is_found_among_the_writers_marks():
    assert late_drops_mark(frozenset({("rows:ab", 5), (LATE_DROPS_WRITER, 9)})) == 9
    assert late_drops_mark(frozenset({("rows:ab", 5)})) is None


@pytest.mark.parametrize("marks", [7, "abc", (1, 2), frozenset({1, "x", (1, 2, 3)}), None])
def test_another_readers_marks_are_no_late_drops_mark_and_answers_go_on(tmp_path, monkeypatch, marks):
    """A realtime reader adapter's generation() may be any hashable: a reader of another store made
    every answer a 500 once the marks were read for the late-drops mark."""
    from tests.unit.serving.test_speed_cache import MarkingRealtime

    assert late_drops_mark(marks) is None
    monkeypatch.setattr(MarkingRealtime, "generation", lambda self: marks)
    serving, store = _serving(tmp_path)
    store.write(BUCKET, 4)
    assert _provenance(serving).complete


def test_a_row_dropped_at_the_watermark_itself_is_covered_only_by_a_later_cutoff():
    """Spark drops a row as late when its ingest time is at or below the watermark; a batch cutoff
    T takes the rows ingested before T. A watermark landing exactly on T left a row ingested at T in
    neither layer while answers at cutoff T said complete."""
    from serving_layer.staleness import late_drop_reason

    watermark = 1_700_000_040_000
    assert late_drop_reason(watermark, (watermark, 1)) is not None
    assert late_drop_reason(watermark + 1, (watermark, 1)) is None
    assert late_drop_reason(watermark - 1, (watermark, 1)) is not None
