"""The master dataset's compaction, without a store: which hours a run compacts and how far its
marker moves, which batch runs keep the originals, the marker's format, the hour folders' names."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from batch_layer.compaction import plan, readers
from stores.master_compacted import (
    HOUR_MS,
    Compacted,
    CompactionMarkerMalformed,
    hour_dir,
    hour_of_dir,
    hour_partition,
)

T0 = int(datetime(2026, 12, 5, 22, tzinfo=UTC).timestamp() * 1000)  # an hour's start, the day before a change of date


def hours(*offsets: int) -> list[int]:
    return [T0 + k * HOUR_MS for k in offsets]


def test_a_first_run_compacts_every_finished_hour_from_the_first_archived_one():
    todo, through = plan(hours(0, 1, 3, 5), None, sealed_ms=T0 + 5 * HOUR_MS, max_hours=100)
    assert todo == hours(0, 1, 3)  # hour 5 may still get files; hours 2 and 4 hold none
    assert through == T0 + 5 * HOUR_MS


def test_a_later_run_starts_at_the_marker_and_passes_empty_hours():
    todo, through = plan(hours(0, 1, 3, 5), T0 + 2 * HOUR_MS, sealed_ms=T0 + 7 * HOUR_MS, max_hours=100)
    assert todo == hours(3, 5)
    assert through == T0 + 7 * HOUR_MS
    assert plan([], T0, sealed_ms=T0 + 3 * HOUR_MS, max_hours=100) == ([], T0 + 3 * HOUR_MS)


def test_a_run_limited_in_hours_moves_the_marker_only_past_those_it_compacted():
    todo, through = plan(hours(0, 1, 3, 5), None, sealed_ms=T0 + 9 * HOUR_MS, max_hours=2)
    assert todo == hours(0, 1)
    assert through == T0 + 2 * HOUR_MS, "hour 3 is not compacted: the marker must not pass it"


def test_the_marker_never_moves_back_nor_past_what_the_archiver_finished():
    # completeness behind the marker (a master rebuilt meanwhile): nothing to do, the marker stays
    assert plan(hours(0, 1), T0 + 4 * HOUR_MS, sealed_ms=T0 + 2 * HOUR_MS, max_hours=10) == ([], T0 + 4 * HOUR_MS)
    # nothing archived yet: the marker goes no further than the finished hours
    assert plan([], None, sealed_ms=T0, max_hours=10) == ([], T0)
    # a first run whose earliest folder is an hour the archiver has not finished (one partition ahead
    # of another still writing the hour before): the marker passed that hour too, and records
    # archived into it later were left out of every read
    assert plan(hours(3), None, sealed_ms=T0 + 2 * HOUR_MS, max_hours=10) == ([], T0 + 2 * HOUR_MS)


def test_only_runs_that_may_still_run_keep_the_originals():
    now, grace = T0, 3_600_000
    runs = {
        1: {"state": "verified"},
        2: {"state": "writing", "alive": False},  # its process is gone
        3: {"state": "writing", "alive": True, "started_ms": now - 10 * grace},  # asked: it runs
        4: {"state": "writing", "alive": None, "started_ms": now - 60_000},  # another host's, started lately
        5: {"state": "failed", "alive": True},
        # another host's, beating (batch_layer.heartbeat) though started long ago
        6: {"state": "writing", "alive": None, "started_ms": now - 10 * grace, "heartbeat_ms": now - 60_000},
        # another host's, silent for longer than the grace: died (its tables are dropped by retention
        # too). It kept every original for as long as it stayed among the runs recorded: weeks.
        7: {"state": "writing", "alive": None, "started_ms": now - 10 * grace, "heartbeat_ms": now - 2 * grace},
        8: {"state": "writing", "alive": None},  # recorded with no time at all
    }
    assert readers(runs, lambda run: run["alive"], now, grace) == [3, 4, 6]
    assert readers({}, lambda run: True, now, grace) == []


def test_the_marker_round_trips_and_anything_else_is_refused_by_name():
    marker = Compacted(T0, 1_800_000_000_000, T0 - HOUR_MS)
    assert Compacted.from_json(marker.to_json(), "m") == marker
    bad = [
        b"",
        b"not json",
        b"[]",
        b'{"format": 2, "through_ms": 0, "compacted_ms": 0}',
        b'{"format": 1, "through_ms": "0", "compacted_ms": 0, "deleted_before_ms": 0}',
        b'{"format": 1, "through_ms": true, "compacted_ms": 0, "deleted_before_ms": 0}',
        b'{"format": 1, "through_ms": -3600000, "compacted_ms": 0, "deleted_before_ms": 0}',
        b'{"format": 1, "through_ms": 1800, "compacted_ms": 0, "deleted_before_ms": 0}',  # not an hour's start
        b'{"format": 1, "through_ms": 0}',
        b'{"format": 1, "through_ms": 0, "compacted_ms": 0}',  # no deleted_before_ms
        b'{"format": 1, "through_ms": 0, "compacted_ms": 0, "deleted_before_ms": 3600000}',  # after through_ms
        b'{"format": 1, "through_ms": 7200000, "compacted_ms": 0, "deleted_before_ms": 60000}',
        b"\xff\xfe",
    ]
    for data in bad:
        with pytest.raises(CompactionMarkerMalformed, match="/m/_through.json"):
            Compacted.from_json(data, "/m/_through.json")


def test_hour_folders_are_named_as_the_archiver_names_them_in_utc():
    assert hour_partition(T0) == (date(2026, 12, 5), 22)
    assert hour_dir(T0 + 2 * HOUR_MS) == "ingest_date=2026-12-06/ingest_hour=0"
    for hour in hours(0, 1, 2, 30):
        day, name = hour_dir(hour).split("/")
        assert hour_of_dir(day, name) == hour
    for day, name in [
        ("ingest_date=2026-12-05", "ingest_hour=24"),
        ("ingest_date=2026-12-05", "ingest_hour=07"),
        ("ingest_date=2026-13-05", "ingest_hour=1"),
        ("ingest_date=2026-12-05", "_SUCCESS"),
        ("_spark_metadata", "0"),
        ("ingest_date=2026-12-5", "ingest_hour=1"),
    ]:
        assert hour_of_dir(day, name) is None, (day, name)


def test_an_hour_is_read_whole_when_it_holds_a_file_the_log_does_not_list_older_than_it_could_forget():
    from stores.master_live import FORGETTABLE_AFTER_MS, DataFile, hours_to_read_whole, is_data_file

    now = T0 + 30 * HOUR_MS
    old, young = now - FORGETTABLE_AFTER_MS - 1, now - FORGETTABLE_AFTER_MS + 60_000
    a, b, c = (DataFile(f"/m/{hour_dir(T0)}/part-{n}.c000.snappy.parquet", old, 100) for n in "abc")
    files = {T0: [a, b], T0 + HOUR_MS: [DataFile(f"/m/{hour_dir(T0 + HOUR_MS)}/part-d.parquet", young, 100)]}
    listed = {a.path, b.path}
    assert hours_to_read_whole(files, listed, now) == {}
    # A young unlisted file is a killed batch's (the log forgets none that young), whatever its hour.
    assert hours_to_read_whole(files, listed, now + 59_000) == {}
    assert hours_to_read_whole(files, listed, now + 61_000) == {T0 + HOUR_MS: files[T0 + HOUR_MS]}
    files[T0].append(c)
    assert hours_to_read_whole(files, listed, now) == {T0: [c]}
    assert hours_to_read_whole(files, set(), now) == {T0: [a, b, c]}
    assert hours_to_read_whole(files, listed | {c.path}, now, every=True) == {T0: [], T0 + HOUR_MS: files[T0 + HOUR_MS]}
    assert [is_data_file(n) for n in ("part-0.c000.snappy.parquet", "_x.parquet", ".part-0.parquet.crc", "x.json")] == [
        True,
        False,
        False,
        False,
    ]


def test_no_retention_the_settings_accept_forgets_files_younger_than_reads_take_for_forgotten():
    from pydantic import ValidationError

    from definitions.layer_settings import ArchiverSettings
    from stores.master_live import FORGETTABLE_AFTER_MS

    with pytest.raises(ValidationError, match="sink_log_retention_h"):
        ArchiverSettings(sink_log_retention_h=23)
    least = ArchiverSettings(sink_log_retention_h=24).sink_log_retention_h * HOUR_MS
    assert FORGETTABLE_AFTER_MS <= least - HOUR_MS, "an hour's leeway for the archiver's clock"


def test_a_read_lists_the_master_again_while_compactions_move_the_marker_and_gives_up_naming_it(monkeypatch):
    """stores.master.read_master reads the compaction marker again after its listing: a compaction
    that moved it meanwhile may have deleted folders the listing took for empty. Listed again then;
    after LISTINGS listings all overtaken, the read fails by name instead of going on."""
    from contextlib import nullcontext

    import stores.completeness
    import stores.master as master
    import stores.master_compacted
    import stores.master_live
    import stores.webhdfs
    from definitions.settings import Settings

    markers: list = []
    listings: list = []

    def read_compacted(fs, settings):
        markers.append(None)
        return Compacted(T0 + len(markers) // 2 * HOUR_MS, 1) if moving else None

    monkeypatch.setattr(stores.webhdfs, "WebHdfs", lambda settings: nullcontext(None))
    monkeypatch.setattr(stores.completeness, "latest", lambda settings: None)  # the archiver's: none yet
    monkeypatch.setattr(stores.master_compacted, "read_compacted", read_compacted)
    monkeypatch.setattr(stores.master_compacted, "day_folders", lambda fs, path: [])
    monkeypatch.setattr(stores.master_compacted, "archived_hours", lambda fs, settings: {})
    monkeypatch.setattr(
        stores.master_live, "read_live", lambda spark, settings, fs, hours: listings.append(hours) or ("live", [])
    )
    moving = True
    with pytest.raises(master.MasterCompactedMeanwhile, match="compacted while it was listed"):
        master.read_master(None, Settings())
    assert len(listings) == master.LISTINGS
    markers.clear()
    listings.clear()
    moving = False  # no compaction yet, none meanwhile
    assert master.read_master(None, Settings()) == "live"
    assert len(listings) == 1, "a marker that stayed: listed once"

    # Deleting originals rewrites the marker without moving its hour: no reason to list again.
    class Frame:
        def where(self, condition):
            return self

    monkeypatch.setattr(stores.master_compacted, "before_hour", lambda through_ms: ~0)
    monkeypatch.setattr(
        stores.master_live, "read_live", lambda spark, settings, fs, hours: listings.append(hours) or (Frame(), [])
    )
    rewritten = iter(Compacted(T0, k, deleted_before_ms=T0 - k % 2 * HOUR_MS) for k in range(10))
    monkeypatch.setattr(stores.master_compacted, "read_compacted", lambda fs, settings: next(rewritten))
    listings.clear()
    assert isinstance(master.read_master(None, Settings()), Frame)
    assert len(listings) == 1, "a marker rewritten at the same hour: listed once"


def test_a_compaction_that_would_not_wait_is_refused_while_another_runs_from_the_state_directory(settings):
    """The daily DAG's compaction waited for an operator's (an flock): it held Airflow's only task slot
    for hours, and every batch task waited behind it. With `wait` False it is refused at once, naming
    the holder, and the DAG retries it later."""
    import threading

    from batch_layer.compaction import CompactionRefused, compact_master
    from definitions.files import state_lock

    outcome: list[BaseException] = []

    def other() -> None:
        try:
            compact_master(settings, spark=object(), wait=False)
        except BaseException as exc:  # noqa: BLE001 - what it raised is the outcome
            outcome.append(exc)

    with state_lock(settings.state_dir, "master-compaction.lock", "master compaction"):
        run = threading.Thread(target=other, daemon=True)
        run.start()
        run.join(timeout=30)
        assert not run.is_alive(), "it waited for the compaction holding the lock"
    assert len(outcome) == 1 and isinstance(outcome[0], CompactionRefused), outcome
    assert "another compaction runs from" in str(outcome[0]) and "pid" in str(outcome[0])
