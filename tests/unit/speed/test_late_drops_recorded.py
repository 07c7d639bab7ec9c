"""A micro-batch that dropped rows as later than the watermark records them, with the watermark it
ran with, for the serving layer (no service: the progress is Spark's shape, the record counted)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from definitions.settings import Settings
from speed_layer.late_drops import PENDING, late_drops_recorder, record_pending_late_drops
from stores.progress import ProgressFile


class Marks:
    """The realtime store's late-drops mark (stores.realtime_writes.LateDropsMarks), counted."""

    def __init__(self) -> None:
        self.moves = 0
        self.closed = 0
        self.fail = False

    def mark(self) -> None:
        if self.fail:
            raise ConnectionError("cassandra away")
        self.moves += 1

    def close(self) -> None:
        self.closed += 1


@pytest.fixture(autouse=True)
def marks(monkeypatch) -> Marks:
    from stores import registry

    made = Marks()
    monkeypatch.setattr(registry, "late_drops_marks", lambda _settings: made)
    return made


def progress(dropped: int, watermark: str | None):
    ops = [
        SimpleNamespace(numRowsDroppedByWatermark=dropped, numRowsTotal=10),
        SimpleNamespace(numRowsDroppedByWatermark=0, numRowsTotal=10),
    ]
    return SimpleNamespace(stateOperators=ops, eventTime={"watermark": watermark} if watermark else {})


def query_progress(batch_id: int, dropped: int):
    """A query's whole progress (as ProgressFile gets it) whose batch dropped `dropped` rows as late."""
    return SimpleNamespace(
        name="speed",
        batchId=batch_id,
        timestamp="",
        numInputRows=9,
        inputRowsPerSecond=0.0,
        processedRowsPerSecond=0.0,
        durationMs={},
        stateOperators=progress(dropped, "2026-11-29T04:00:00.000Z").stateOperators,
        eventTime={"watermark": "2026-11-29T04:00:00.000Z"},
        observedMetrics={},
        sources=[],
    )


def test_a_batch_that_dropped_late_rows_records_them_with_its_watermark(monkeypatch):
    from stores import checkpoints

    recorded = []
    monkeypatch.setattr(checkpoints, "record_late_drops", lambda _s, below, rows, **_: recorded.append((below, rows)))
    record = late_drops_recorder(Settings())
    record(progress(0, "2026-11-29T04:00:00.000Z"))
    record(progress(3, None))  # no watermark yet: nothing can have been dropped as late
    assert recorded == []
    record(progress(5, "2026-11-29T04:00:00.000Z"))
    assert recorded == [(1_795_924_800_000, 5)]
    monkeypatch.setattr(checkpoints, "record_late_drops", lambda *_, **__: (_ for _ in ()).throw(OSError("hdfs away")))
    pending = record(progress(1, "2026-11-29T04:00:00.000Z"))[PENDING]
    assert pending[:2] == [1_795_924_800_000, 1], "a failed record does not stop the listener"
    more = record(progress(2, "2026-11-29T04:01:00.000Z"))[PENDING]
    assert more == [1_795_924_860_000, 3, pending[2]], "one record, under one id, until it is made"
    monkeypatch.setattr(checkpoints, "record_late_drops", lambda _s, below, rows, **_: recorded.append((below, rows)))
    # HDFS back: what could not be recorded is, at the next batch
    assert record(progress(0, "2026-11-29T04:02:00.000Z")) == {PENDING: None}
    assert recorded == [(1_795_924_800_000, 5), (1_795_924_860_000, 3)]
    record(progress(0, "2026-11-29T04:03:00.000Z"))
    assert len(recorded) == 2, "recorded once"


def test_drops_not_recorded_when_the_job_died_are_recorded_at_its_next_start(tmp_path, monkeypatch):
    """HDFS away: the record failed, then the next commit failed too and the job stopped. The drops,
    kept only in its memory, were lost, and answers missing those rows said complete. They are
    kept in the progress file beside the driver, and the next start records them first."""
    from stores import checkpoints

    settings = Settings(state_dir=tmp_path)
    monkeypatch.setattr(checkpoints, "record_late_drops", lambda *_, **__: (_ for _ in ()).throw(OSError("hdfs away")))
    hook = late_drops_recorder(settings)
    file = ProgressFile(settings, "speed-layer", hooks={"speed": hook})
    file.progress(query_progress(7, 4))
    with pytest.raises(OSError):
        record_pending_late_drops(settings)  # HDFS still away: the start fails, the record stays
    recorded = []
    monkeypatch.setattr(checkpoints, "record_late_drops", lambda _s, below, rows, **_: recorded.append((below, rows)))
    record_pending_late_drops(settings)
    assert recorded == [(1_795_924_800_000, 4)]
    record_pending_late_drops(settings)  # that start stopped before its query began: a second start
    assert len(recorded) == 1, "recorded once"
    ProgressFile(settings, "speed-layer").started("q", "speed")  # the new run's file
    record_pending_late_drops(settings)
    assert len(recorded) == 1, "nothing pending any more"


def test_each_record_of_late_drops_moves_the_realtime_stores_mark_after_it_is_written(monkeypatch, marks):
    """The serving layer reads the record when the mark moves (not a minute later): the mark moves
    only once the record is on HDFS, and a mark that cannot be written stops nothing."""
    from stores import checkpoints

    seen_at_record = []
    monkeypatch.setattr(checkpoints, "record_late_drops", lambda *_, **__: seen_at_record.append(marks.moves))
    record = late_drops_recorder(Settings())
    record(progress(0, "2026-11-29T04:00:00.000Z"))
    assert marks.moves == 0, "no drops: no mark"
    record(progress(2, "2026-11-29T04:00:00.000Z"))
    assert seen_at_record == [0] and marks.moves == 1
    monkeypatch.setattr(checkpoints, "record_late_drops", lambda *_, **__: (_ for _ in ()).throw(OSError("hdfs away")))
    record(progress(1, "2026-11-29T04:00:00.000Z"))
    assert marks.moves == 1, "nothing recorded: nothing to read"
    monkeypatch.setattr(checkpoints, "record_late_drops", lambda *_, **__: None)
    marks.fail = True
    assert record(progress(1, "2026-11-29T04:01:00.000Z")) == {PENDING: None}, "recorded, the mark aside"


def test_drops_recorded_at_a_start_move_the_mark_too(tmp_path, monkeypatch, marks):
    import json

    from stores import checkpoints
    from stores.progress import progress_path

    settings = Settings(state_dir=tmp_path)
    path = progress_path(settings, "speed-layer")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({PENDING: [1_000, 3]}))
    monkeypatch.setattr(checkpoints, "record_late_drops", lambda *_, **__: None)
    record_pending_late_drops(settings)
    assert marks.moves == 1 and marks.closed == 1


def test_drops_recorded_at_a_start_are_not_pending_again_when_the_mark_cannot_be_made(tmp_path, monkeypatch):
    """The record was on HDFS, then making the mark raised: the pending entry stayed, and every later
    start added the same rows again."""
    import json

    from stores import checkpoints, registry
    from stores.progress import progress_path

    settings = Settings(state_dir=tmp_path)
    path = progress_path(settings, "speed-layer")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({PENDING: [1_000, 3]}))
    recorded = []
    monkeypatch.setattr(checkpoints, "record_late_drops", lambda _s, below, rows, **_: recorded.append((below, rows)))
    monkeypatch.setattr(registry, "late_drops_marks", lambda _s: (_ for _ in ()).throw(ValueError("no adapter")))
    record_pending_late_drops(settings)
    record_pending_late_drops(settings)
    assert recorded == [(1_000, 3)]


class MemoryHdfs:
    """HDFS holding files in memory, as record_late_drops reads and writes them."""

    files: dict[str, bytes] = {}

    def __init__(self, _settings, **_) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def read(self, path: str, max_bytes: int | None = None):
        return self.files.get(path)

    def write_whole(self, path: str, data: bytes) -> None:
        self.files[path] = data


def test_drops_recorded_then_killed_before_the_progress_file_said_so_are_not_counted_again(tmp_path, monkeypatch):
    """The pending drops were recorded on HDFS, and the job was killed before its progress file said
    they were: the next start recorded the same rows again, and the count doubled at every such kill."""
    from stores import checkpoints, webhdfs

    MemoryHdfs.files = {}
    monkeypatch.setattr(webhdfs, "WebHdfs", MemoryHdfs)
    settings = Settings(state_dir=tmp_path)
    real = checkpoints.record_late_drops
    monkeypatch.setattr(checkpoints, "record_late_drops", lambda *_a, **_k: (_ for _ in ()).throw(OSError("away")))
    hook = late_drops_recorder(settings)
    file = ProgressFile(settings, "speed-layer", hooks={"speed": hook})

    file.progress(query_progress(7, 4))  # HDFS away: pending in the progress file
    monkeypatch.setattr(checkpoints, "record_late_drops", real)
    hook(progress(0, "2026-11-29T04:00:00.000Z"))  # the next batch records it; killed before its file is written
    assert checkpoints.read_late_drops(settings) == (1_795_924_800_000, 4)
    record_pending_late_drops(settings)  # the next start
    assert checkpoints.read_late_drops(settings) == (1_795_924_800_000, 4), "counted once"
    record_pending_late_drops(settings)
    assert checkpoints.read_late_drops(settings) == (1_795_924_800_000, 4)


def test_a_record_made_again_with_more_rows_adds_only_those_and_one_without_an_id_keeps_the_ids(monkeypatch):
    """A write whose answer was lost (it landed) kept its rows pending under its id, and the next
    batch added rows to them: skipped as made already, the added rows were never counted."""
    from stores import checkpoints, webhdfs

    MemoryHdfs.files = {}
    monkeypatch.setattr(webhdfs, "WebHdfs", MemoryHdfs)
    settings = Settings()
    checkpoints.record_late_drops(settings, 1_000, 5, record_id="x")
    checkpoints.record_late_drops(settings, 2_000, 8, record_id="x")  # the same pending record, 3 rows more
    assert checkpoints.read_late_drops(settings) == (2_000, 8)
    checkpoints.record_late_drops(settings, 2_000, 8, record_id="x")
    assert checkpoints.read_late_drops(settings) == (2_000, 8)
    checkpoints.record_late_drops(settings, 1_500, 2)  # an older progress file's pending rows: no id
    checkpoints.record_late_drops(settings, 2_000, 8, record_id="x")
    assert checkpoints.read_late_drops(settings) == (2_000, 10)


def test_a_pending_record_holding_a_number_beyond_range_is_passed_over_not_a_failure_at_every_start(
    tmp_path, monkeypatch
):
    """`1e400` in the progress file's pending drops raised OverflowError before Spark started, at every
    start: the speed layer was kept down until the file was edited by hand."""
    import json

    from speed_layer.late_drops import PENDING
    from stores import checkpoints
    from stores.progress import progress_path

    settings = Settings(state_dir=tmp_path)
    path = progress_path(settings, "speed-layer")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({PENDING: [float("inf"), 4, "id"]}).replace("Infinity", "1e400"))
    recorded = []
    monkeypatch.setattr(checkpoints, "record_late_drops", lambda *a, **k: recorded.append(a))
    record_pending_late_drops(settings)
    assert recorded == []


def test_a_late_drops_record_holding_a_number_beyond_range_is_started_again(monkeypatch):
    """Every recording failed on it (OverflowError), the drops stayed pending for good, and answers
    missing those rows were served as complete."""
    import json

    from stores import checkpoints, webhdfs

    written = {}

    class Hdfs:
        def __init__(self, *_a, **_k) -> None:
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            return None

        def read(self, path, max_bytes=None):
            return written.get(path, b'{"below_ms": 1e400, "rows": 3, "ids": {}}')

        def write_whole(self, path, data):
            written[path] = data

    monkeypatch.setattr(webhdfs, "WebHdfs", Hdfs)
    settings = Settings()
    checkpoints.record_late_drops(settings, 1_000, 4, record_id="a")
    assert json.loads(written[checkpoints.late_drops_path(settings)])["below_ms"] == 1_000
    assert checkpoints.read_late_drops(settings) == (1_000, 4)
