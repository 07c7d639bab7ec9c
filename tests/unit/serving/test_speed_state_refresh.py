"""The speed layer's marker and the replay marks are read again once a minute by one query only:
the others answer from what was read before meanwhile, so a slow HDFS holds up one query, not all
(no service: the reads are counted and held)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from definitions.settings import Settings
from definitions.views import PAGE_VIEWS, Registry
from serving_layer import speed_state
from serving_layer.speed_state import SpeedState
from tests.support.polling import wait_for


def test_one_query_reads_the_marks_again_and_the_others_answer_from_the_last_read(tmp_path, monkeypatch):
    from stores import checkpoints, replays

    reads = {"marker": 0, "marks": 0}
    slow = threading.Event()

    def read_marker(_settings):
        reads["marker"] += 1
        slow.wait(5)  # HDFS answering slowly
        return None

    def read_replays(_settings):
        reads["marks"] += 1
        return {}, {}

    monkeypatch.setattr(checkpoints, "read_marker", read_marker)
    monkeypatch.setattr(replays, "read_replays", read_replays)
    state = SpeedState(Settings(state_dir=tmp_path))
    state.known(None)
    state.recheck_s = 0.0  # the minute has passed
    with ThreadPoolExecutor(8) as pool:
        answers = [pool.submit(state.marker) for _ in range(8)]
        wait_for(lambda: sum(a.done() for a in answers) >= 7, "the queries not reading to answer", 3, 0.02)
        assert not any(a.exception() for a in answers if a.done()), "they answered from the last read"
        assert reads["marker"] == 1 and not slow.is_set()
        slow.set()
        assert all(a.result(timeout=5) is None for a in answers)
    assert reads["marker"] == 1 and reads["marks"] == 1


def test_before_anything_was_read_every_query_waits_for_the_one_read(tmp_path, monkeypatch):
    from stores import checkpoints, replays

    reads = {"marker": 0}
    started = threading.Barrier(8)

    def read_marker(_settings):
        reads["marker"] += 1
        time.sleep(0.2)  # an HDFS round trip, long enough for every query to ask meanwhile
        return None

    def ask(_):
        started.wait(5)  # every query asks at once, before any read is done
        return state.marker()

    monkeypatch.setattr(checkpoints, "read_marker", read_marker)
    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({}, {}))
    state = SpeedState(Settings(state_dir=tmp_path))
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(ask, range(8))) == [None] * 8
    assert reads["marker"] == 1


def test_a_switched_replay_is_not_answered_from_marks_older_than_its_replaced_rows_live(tmp_path, monkeypatch):
    """A replay deletes the rows of the replay it replaced replaced_rows_kept_s after its switch: a
    worker that could not read the marks since then would read deleted rows. It refuses the view as
    HDFS unreadable instead, until it reads them; views without a switched replay answer on."""
    from serving_layer.unavailable import StoreUnavailable
    from stores import checkpoints, replays
    from stores.replays import ReplayMark

    hdfs_down = True

    def read_replays(_settings):
        if hdfs_down:
            raise ConnectionError("HDFS unreachable")
        return {}, {}

    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: None)
    monkeypatch.setattr(replays, "read_replays", read_replays)
    state = SpeedState(Settings(state_dir=tmp_path))
    switched = ReplayMark("page_views", 1_000, 2_000, shadow="page_views~replay-2000", split_ms=60_000)
    state.known(None, overlays={"page_views": switched})
    assert state.overlay("page_views") == switched and state.marks_error is None
    settings = Settings(state_dir=tmp_path)
    # An answer takes marks at most marks_trusted_s old and ends within cleanup_settle_s, or is redone.
    assert state.marks_trusted_s == speed_state.marks_trusted_s(settings) > settings.api.speed_recheck_s
    assert speed_state.replaced_rows_kept_s(settings) > state.marks_trusted_s + settings.batch.cleanup_settle_s

    state.recheck_s = 0.0  # read again at each question, and failing
    assert state.overlay("page_views") == switched, "marks read just now are trusted though a read failed"
    assert "HDFS unreachable" in (state.marks_error or "")
    state.marks_trusted_s = 0.0  # ... until they are too old
    try:
        state.overlay("page_views")
        raise AssertionError("a switched replay answered from marks too old")
    except StoreUnavailable as exc:
        assert exc.component == "hdfs" and "replay marks" in exc.detail
    assert state.overlay("page_views_by_channel") is None, "a view without a switched replay answers"

    hdfs_down = False
    assert state.overlay("page_views") is None and state.marks_error is None, "read again: the replay is gone"


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now


def switched_mark():
    from stores.replays import ReplayMark

    return ReplayMark("page_views", 1_000, 2_000, shadow="page_views~replay-2000", split_ms=60_000)


def test_a_query_during_the_read_after_an_idle_minute_waits_for_it_rather_than_refuse(tmp_path, monkeypatch):
    from stores import checkpoints, replays

    clock = Clock()
    monkeypatch.setattr(speed_state, "time", clock)
    reading, release = threading.Event(), threading.Event()

    def read_marker(_settings):
        reading.set()
        release.wait(5)
        return None

    monkeypatch.setattr(checkpoints, "read_marker", read_marker)
    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({}, {"page_views": switched_mark()}))
    state = SpeedState(Settings(state_dir=tmp_path))
    state.known(None, overlays={"page_views": switched_mark()})
    clock.now += 100  # idle for longer than the marks are trusted
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(state.overlay, "page_views")
        assert reading.wait(5)
        second = pool.submit(state.overlay, "page_views")
        wait_for(lambda: second.running(), "the second query to ask", 3, 0.01)
        release.set()
        assert first.result(5) == switched_mark()
        assert second.result(5) == switched_mark(), "it waited for the read instead of answering 503"


def test_marks_are_trusted_from_when_their_read_began(tmp_path, monkeypatch):
    """A slow read lists the marks as they were when it began: its age counts from then."""
    from serving_layer.unavailable import StoreUnavailable
    from stores import checkpoints, replays

    clock = Clock()
    monkeypatch.setattr(speed_state, "time", clock)
    failing = False

    def read_replays(_settings):
        if failing:
            raise ConnectionError("HDFS unreachable")
        clock.now += 30  # a slow listing
        return {}, {"page_views": switched_mark()}

    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: None)
    monkeypatch.setattr(replays, "read_replays", read_replays)
    state = SpeedState(Settings(state_dir=tmp_path, api={"speed_recheck_s": 60}))  # whatever the environment says
    began = clock.now
    assert state.overlay("page_views") == switched_mark()  # read (30 s), from `began`
    failing = True
    clock.now = began + state.marks_trusted_s + 1  # the re-read fails
    try:
        state.overlay("page_views")
        raise AssertionError("marks listed over marks_trusted_s ago answered")
    except StoreUnavailable as exc:
        assert exc.component == "hdfs" and "None" not in exc.detail


def test_a_read_begun_before_a_refresh_does_not_answer_for_it(tmp_path, monkeypatch):
    """`lambdactl replay` switches, then asks each worker to read the marks again (read_now): a read
    already under way listed them before the switch, so the worker reads them once more and keeps
    what that later read listed."""
    from stores import checkpoints, replays

    reads = {"n": 0}
    reading, release = threading.Event(), threading.Event()

    def read_marker(_settings):
        reads["n"] += 1
        if reads["n"] == 1:
            reading.set()
            release.wait(5)
        return None

    def read_replays(_settings):  # the first read lists the switched replay; the later one, none
        return {}, ({"page_views": switched_mark()} if reads["n"] == 1 else {})

    monkeypatch.setattr(checkpoints, "read_marker", read_marker)
    monkeypatch.setattr(replays, "read_replays", read_replays)
    state = SpeedState(Settings(state_dir=tmp_path))
    with ThreadPoolExecutor(2) as pool:
        under_way = pool.submit(state.marker)
        assert reading.wait(5)
        refreshed = pool.submit(state.read_now)
        release.set()
        under_way.result(5), refreshed.result(5)
    assert reads["n"] == 2
    assert state.overlays == {}, "the marks listed after the refresh was asked for are kept"


def test_a_refresh_that_cannot_read_the_marker_keeps_the_last_and_says_so(tmp_path, monkeypatch):
    """Without a marker every view would look maintained since 0 and unchanged: a refresh whose
    marker read fails keeps the marker it had, and says the read failed."""
    from stores import checkpoints, replays
    from stores.checkpoints import Marker

    def unreachable(_settings):
        raise ConnectionError("HDFS unreachable")

    monkeypatch.setattr(checkpoints, "read_marker", unreachable)
    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({}, {}))
    state = SpeedState(Settings(state_dir=tmp_path))
    kept = Marker(ingest_bucket_s=60, started_ms=1_000)
    state.known(kept)
    assert state.read_now() is kept and state.marker() is kept
    assert "HDFS unreachable" in (state.read_error or "")


def test_a_record_of_late_drops_that_cannot_be_read_keeps_the_marker_and_the_last_record(tmp_path, monkeypatch):
    from stores import checkpoints, replays
    from stores.checkpoints import Marker

    marker = Marker(60, 1_000)
    records = iter([(5_000, 2), ValueError("not JSON"), (7_000, 3)])

    def read_late_drops(_settings):
        found = next(records)
        if isinstance(found, Exception):
            raise found
        return found

    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: marker)
    monkeypatch.setattr(checkpoints, "read_late_drops", read_late_drops)
    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({}, {}))
    state = SpeedState(Settings(state_dir=tmp_path))
    assert state.read_now() == marker and state.late_drops == (5_000, 2)
    assert state.read_now() == marker and state.read_error is None, "the marker was read all the same"
    assert state.late_drops == (5_000, 2), "the last record read stands"
    state.read_now()
    assert state.late_drops == (7_000, 3)


def test_a_service_that_never_read_the_marks_refuses_queries_until_it_does(tmp_path, monkeypatch):
    """A worker starting while HDFS cannot be read took "no marker" for a speed layer never started
    (every view serving, one being built too) and "no marks" for no switched replay (its rows
    unread): short answers marked complete. It refuses instead, and tries again within seconds."""
    from serving_layer.unavailable import StoreUnavailable
    from stores import checkpoints, replays

    clock = Clock()
    monkeypatch.setattr(speed_state, "time", clock)
    hdfs_down = {"marker": True, "marks": True}

    def read_marker(_settings):
        if hdfs_down["marker"]:
            raise ConnectionError("HDFS unreachable")
        return None

    def read_replays(_settings):
        if hdfs_down["marks"]:
            raise ConnectionError("HDFS unreachable")
        return {}, {"page_views": switched_mark()}

    monkeypatch.setattr(checkpoints, "read_marker", read_marker)
    monkeypatch.setattr(replays, "read_replays", read_replays)
    state = SpeedState(Settings(state_dir=tmp_path))
    views = Registry((PAGE_VIEWS,))
    for down in ({"marker": True, "marks": True}, {"marker": False, "marks": True}, {"marker": True, "marks": False}):
        hdfs_down.update(down)
        clock.now += speed_state.UNREAD_RETRY_S + 0.1
        try:
            state.lifecycle("page_views", None, views)
            raise AssertionError(f"a query answered from marks never read ({down})")
        except StoreUnavailable as exc:
            assert exc.component == "hdfs" and "HDFS unreachable" in exc.detail
        if down == {"marker": False, "marks": True}:
            state = SpeedState(Settings(state_dir=tmp_path))  # the marker read, never the marks: a new worker
    hdfs_down.update(marker=False, marks=False)
    clock.now += speed_state.UNREAD_RETRY_S + 0.1  # read again within seconds, not a minute
    assert state.lifecycle("page_views", None, views).state == "serving"
    assert state.overlay("page_views") == switched_mark(), "the switched replay's rows are read"


def test_a_marker_written_before_start_times_were_recorded_starts_when_its_file_was_written(tmp_path, monkeypatch):
    """Such a marker said "no start time", which the staleness check takes for a speed layer that never
    started: answers missing expired realtime rows said complete. The speed layer takes the marker
    file's time for its first start (stores.checkpoints.file_written_ms); so does the serving layer."""
    from stores import checkpoints, replays

    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: checkpoints.Marker(60, None))
    monkeypatch.setattr(checkpoints, "file_written_ms", lambda _settings: 1_700_000_000_000)
    monkeypatch.setattr(checkpoints, "read_late_drops", lambda _settings: None)
    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({}, {}))
    state = SpeedState(Settings(state_dir=tmp_path))
    marker = state.read_now()
    assert marker is not None and marker.started_ms == 1_700_000_000_000


def test_the_marker_is_read_again_every_api_speed_recheck_s_and_replaced_rows_kept_by_it(tmp_path, monkeypatch):
    """api.speed_recheck_s sets both how often a worker reads the marker and the marks again and how
    long a replay keeps the rows its switch replaced: each follows the one setting."""
    from stores import checkpoints, replays

    clock = Clock()
    monkeypatch.setattr(speed_state, "time", clock)
    reads: list[float] = []
    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: reads.append(clock.now))
    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({}, {}))
    settings = Settings(state_dir=tmp_path, api={"speed_recheck_s": 10})
    state = SpeedState(settings)
    state.marker()
    clock.now += 9.5
    state.marker()
    assert len(reads) == 1, "read again before api.speed_recheck_s passed"
    clock.now += 1
    state.marker()
    assert len(reads) == 2
    minute = Settings(state_dir=tmp_path, api={"speed_recheck_s": 60})
    assert speed_state.replaced_rows_kept_s(minute) - speed_state.replaced_rows_kept_s(settings) == 50


def test_replaced_rows_are_kept_as_long_as_the_running_api_trusts_its_marks(tmp_path):
    """The API takes the persisted settings alone; lambdactl may be told a shorter api.speed_recheck_s
    (its environment, a TOML file). Kept for its own, a replay deleted rows an API worker that read the
    marks just before the switch still answered from: short answers, labelled complete."""
    from definitions.settings_store import persist

    running = Settings(state_dir=tmp_path, api={"speed_recheck_s": 60}, batch={"cleanup_settle_s": 20})
    persist(running)
    told = Settings(state_dir=tmp_path, api={"speed_recheck_s": 10}, batch={"cleanup_settle_s": 20})
    assert speed_state.replaced_rows_kept_s(told) == speed_state.replaced_rows_kept_s(running)
    assert speed_state.replaced_rows_kept_s(told) == 60 + 5 + told.batch.cleanup_settle_s + 5
    hurried = Settings(state_dir=tmp_path, api={"speed_recheck_s": 60}, batch={"cleanup_settle_s": 6})
    assert speed_state.replaced_rows_kept_s(hurried) == speed_state.replaced_rows_kept_s(running), "its settle too"
    persist(told)  # `up` with it: the API reads the marks every 10 s from then on
    assert speed_state.replaced_rows_kept_s(told) == 10 + 5 + told.batch.cleanup_settle_s + 5
