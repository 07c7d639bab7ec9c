"""The speed part kept until the realtime store is written again (serving_layer.speed_cache), with a
realtime store in memory that marks its writes as stores.realtime_writes does (no services)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from definitions.settings import Settings
from serving_layer.service import ServingLayer
from serving_layer.speed_cache import SpeedPartCache
from stores.realtime import RealtimeCell
from tests.support.polling import wait_for
from tests.unit.serving.test_serving_caches import CUTOFF_MS, HOUR, MemoryBatchViews

CHECK_S = 0.02


class MarkingRealtime:
    """page_views rows of one key in memory; every write ends with a new mark of its writer.
    `during_read` runs inside the next series read, right after its rows were read."""

    current: MarkingRealtime | None = None

    def __init__(self, settings: Any, **kwargs: Any) -> None:
        self.rows: dict[int, int] = {}
        self.marks: dict[str, int] = {}
        self.reads = 0
        self.mark_reads = 0
        self.during_read: list = []
        MarkingRealtime.current = self

    def write(self, bucket: int, value: int, mark: bool = True) -> None:
        self.rows[bucket] = value
        if mark:
            self.marks["writer-1"] = self.marks.get("writer-1", 0) + 1

    def generation(self) -> frozenset:
        self.mark_reads += 1
        return frozenset(self.marks.items())

    def series(self, view, granularity, key, buckets, min_ingest_bucket, with_sketches=False) -> dict:
        self.reads += 1
        rows = {b: RealtimeCell(v, None, 1) for b, v in self.rows.items() if b in buckets}
        while self.during_read:  # a write that lands right after the rows were read
            self.during_read.pop()()
        return rows

    def bucket(self, *args: Any) -> dict:
        return {}

    def close(self) -> None:
        pass


def _serving(tmp_path, **api: Any) -> tuple[ServingLayer, MarkingRealtime]:
    settings = Settings(
        state_dir=tmp_path,
        ingest_bucket_s=HOUR,
        api={"realtime_check_s": CHECK_S, **api},
        stores={
            "batch_views": f"{MemoryBatchViews.__module__}.MemoryBatchViews",
            "realtime_reader": f"{__name__}.MarkingRealtime",
        },
    )
    serving = ServingLayer(settings)
    serving.speed.known(None)
    assert MemoryBatchViews.current is not None
    MemoryBatchViews.current.publish(1, "run-1", {})
    return serving, _realtime(serving)


def _realtime(serving: ServingLayer) -> MarkingRealtime:
    serving.realtime.reader()
    assert MarkingRealtime.current is not None
    return MarkingRealtime.current


BUCKET = CUTOFF_MS // 1000 + HOUR  # an event bucket the speed layer holds (after the cutoff)


def _total(serving: ServingLayer) -> int:
    view = next(v for v in serving.views if v.name == "page_views")
    start = CUTOFF_MS // 1000 - 2 * HOUR
    return int(serving.series(view, {"url": "/a"}, start, start + 10 * HOUR, "hour").series.total)


@pytest.fixture
def no_age_limit(monkeypatch):
    """Kept parts never reach MAX_AGE_S: a test counting reads on the real clock is not undone by
    the age slot turning over mid-test (one run in ~60 read the part again at such a turn)."""
    monkeypatch.setattr("serving_layer.speed_cache.MAX_AGE_S", float("inf"))


def test_the_speed_part_is_read_once_until_a_write_is_marked(tmp_path, no_age_limit):
    serving, store = _serving(tmp_path)
    store.write(BUCKET, 4)
    assert [_total(serving) for _ in range(5)] == [4] * 5
    assert store.reads == 1, "unchanged marks: the kept part answers"
    store.write(BUCKET, 6)
    wait_for(lambda: _total(serving) == 6, "the marked write to show", timeout_s=2, interval_s=0.005)
    assert store.reads == 2


def test_the_marks_are_read_at_most_every_realtime_check_s(tmp_path, no_age_limit):
    serving, store = _serving(tmp_path, realtime_check_s=1.0)  # the most allowed: 20 reads fit in it under load
    store.write(BUCKET, 1)
    for _ in range(20):
        _total(serving)
    assert store.mark_reads == 1
    store.write(BUCKET, 2)
    assert _total(serving) == 1, "within realtime_check_s the marks read before the write serve"
    wait_for(lambda: _total(serving) == 2, "the write after realtime_check_s", timeout_s=8, interval_s=0.05)
    assert store.mark_reads == 2


def test_a_write_that_lands_while_a_part_is_read_is_not_missed(tmp_path):
    """The part read is labelled with the marks read before it: a write that lands while it is read
    moves the marks, so the next check reads again (labelled with marks read after it, the write
    would be missed for as long as nothing else is written)."""
    serving, store = _serving(tmp_path)
    store.write(BUCKET, 1)
    store.during_read.append(lambda: store.write(BUCKET, 5))
    assert _total(serving) == 1
    wait_for(lambda: _total(serving) == 5, "the write that landed mid-read", timeout_s=2, interval_s=0.005)


def test_an_unmarked_write_shows_once_the_kept_part_is_max_age_old(tmp_path, monkeypatch):
    clock = [1_000.0]
    monkeypatch.setattr("serving_layer.speed_cache.time.monotonic", lambda: clock[0])
    serving, store = _serving(tmp_path)
    store.write(BUCKET, 1)
    assert _total(serving) == 1
    store.write(BUCKET, 3, mark=False)  # a writer that does not mark (none of the platform's)
    clock[0] += 1
    assert _total(serving) == 1
    clock[0] += 60
    assert _total(serving) == 3


def test_speed_cache_off_reads_every_time(tmp_path):
    serving, store = _serving(tmp_path, speed_cache_mib=0)
    store.write(BUCKET, 2)
    for _ in range(3):
        assert _total(serving) == 2
    assert store.reads == 3
    assert store.mark_reads == 1, "the marks are still read every realtime_check_s (a late-drops mark is heard)"


def test_a_reader_without_write_marks_is_read_every_time(tmp_path, monkeypatch):
    serving, store = _serving(tmp_path)
    monkeypatch.delattr(MarkingRealtime, "generation")
    store.write(BUCKET, 2)
    for _ in range(3):
        assert _total(serving) == 2
    assert store.reads == 3


def test_unreadable_marks_are_an_unreadable_realtime_store(tmp_path, monkeypatch):
    serving, store = _serving(tmp_path)

    def broken(self) -> frozenset:
        raise ConnectionError("no host")

    monkeypatch.setattr(MarkingRealtime, "generation", broken)
    view = next(v for v in serving.views if v.name == "page_views")
    start = CUTOFF_MS // 1000 - 2 * HOUR
    answer = serving.series(view, {"url": "/a"}, start, start + 10 * HOUR, "hour", allow_partial=True)
    assert not answer.provenance.complete and answer.provenance.unavailable == ["cassandra"]


def test_one_thread_reads_the_marks_while_the_others_go_on_with_the_last_ones(no_age_limit):
    cache = SpeedPartCache(max_bytes=1 << 20, check_s=0.0)
    entered, release = threading.Event(), threading.Event()
    reads = []

    def slow_marks() -> frozenset:
        reads.append(1)
        if len(reads) == 2:
            entered.set()
            release.wait(5)
        return frozenset({("w", len(reads))})

    assert cache.get("k", slow_marks, lambda: "v1") == "v1"
    reader = threading.Thread(target=lambda: cache.get("k", slow_marks, lambda: "v2"))
    reader.start()
    assert entered.wait(5)
    assert cache.get("k", slow_marks, lambda: pytest.fail("read again")) == "v1", "the last marks still serve"
    release.set()
    reader.join(5)
    assert len(reads) == 2
    assert cache.get("k", lambda: frozenset({("w", 2)}), lambda: "v3") == "v2"


def test_a_part_read_under_older_marks_never_answers_under_newer_ones(no_age_limit):
    """A slow read that began before the marks moved ends after another thread read the new value:
    what it brings back is not kept where the newer marks look."""
    cache = SpeedPartCache(max_bytes=1 << 20, check_s=0.0)
    marks = [frozenset({("w", 1)})]
    started, release = threading.Event(), threading.Event()

    def slow_old_read() -> str:
        started.set()
        release.wait(5)
        return "old"

    reader = threading.Thread(target=lambda: cache.get("k", lambda: marks[0], slow_old_read))
    reader.start()
    assert started.wait(5)
    marks[0] = frozenset({("w", 2)})  # a write ended meanwhile
    assert cache.get("k", lambda: marks[0], lambda: "new") == "new"
    release.set()
    reader.join(5)
    assert cache.get("k", lambda: marks[0], lambda: pytest.fail("read again")) == "new"


@pytest.mark.parametrize(
    "api",
    [{"speed_cache_mib": -1}, {"realtime_check_s": 0}, {"realtime_check_s": 5}, {"realtime_check_s": "soon"}],
)
def test_speed_cache_settings_out_of_range_are_refused(api):
    with pytest.raises(ValueError, match="speed_cache_mib|realtime_check_s"):
        Settings(ingest_bucket_s=HOUR, api=api)
