"""Compacting the master dataset on the real HDFS, with the archiver's own writer: a master of its own
is written by Spark's file sink, partitioned by ingest hour as the archiver does it, several small
files per hour. Compaction rewrites the hours the completeness marker says are finished as one file
each and deletes their originals; the master dataset reads the same rows before and after two runs
at once, again after a later run, and after a crashed run's leftover; a marker that is not one, or
none beside compacted hours, fails the read by name."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from batch_layer.compaction import CompactionMismatch, CompactionRefused, compact_master
from ingest.archiver import master_writer, with_ingest_partitions
from stores import completeness, master_live
from stores.master import master_url, read_archived, read_master
from stores.master_compacted import (
    HOUR_MS,
    Compacted,
    CompactionMarkerMalformed,
    compacted_path,
    hour_dir,
    marker_path,
    read_compacted,
)
from stores.webhdfs import WebHdfs

FILES = 4  # input files, one micro-batch each: every hour gets a file from each
PER_HOUR = 25  # rows per hour and file
# How a read refuses a compaction marker past the archiver's completeness.
AHEAD = "past the hours the archiver.s newest completeness marker says are finished"
SOURCE = "event_id STRING, event_time TIMESTAMP, url STRING, event_type STRING, kafka_partition INT, kafka_offset BIGINT, ingest_time TIMESTAMP"


@pytest.fixture
def scratch(settings, unique):
    root = f"/lambda/test-compaction-{unique}"
    archiver = settings.archiver.model_copy(
        update={"master_path": f"{root}/master", "completeness_path": f"{root}/completeness"}
    )
    yield settings.model_copy(update={"archiver": archiver}), root
    with WebHdfs(settings) as fs:
        fs.delete(root, recursive=True)


def archive(spark, settings, root: str, folder, first_hour: int, hours: int, retention: str | None = None) -> None:
    """What the archiver does with records (its own writer), over a folder of them: one micro-batch per file."""
    folder.mkdir()
    offset = 0
    for f in range(FILES):
        lines = []
        for h in range(hours):
            for i in range(PER_HOUR):
                ingest = first_hour + h * HOUR_MS + (f * PER_HOUR + i) * 1000
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ingest / 1000))
                lines.append(
                    {
                        "event_id": f"e-{f}-{h}-{i}",
                        "event_time": stamp + "Z",
                        "url": f"/c{i % 3}",
                        "event_type": "page_view",
                        "kafka_partition": 0,
                        "kafka_offset": offset,
                        "ingest_time": stamp + "Z",
                    }
                )
                offset += 1
        (folder / f"part-{f}.json").write_text("\n".join(json.dumps(r) for r in lines))
    drain(spark, settings, root, folder, retention)


def drain(spark, settings, root: str, folder, retention: str | None = None, source: str = SOURCE) -> None:
    """The archiver's writer over the folder's files not archived yet, one micro-batch per file."""
    stream = spark.readStream.schema(source).option("maxFilesPerTrigger", 1).json(folder.as_uri())
    checkpoint = f"{settings.hdfs.url}{root}/checkpoint"
    writer = master_writer(with_ingest_partitions(stream), settings, checkpoint, retention)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(300)
    assert query.exception() is None


def complete_before(settings, ms: int, batch: int = FILES - 1) -> None:
    """The archiver's completeness marker, saying every record stamped before `ms` is archived."""
    progress = completeness.PartitionProgress(next_offset=10**6, complete_before_ms=ms)
    marker = completeness.Completeness(batch, int(time.time() * 1000), {0: progress}, expected_partitions=1)
    # (a batch id the master holds: the late record's batch, FILES, comes after it)
    completeness.publish(settings, marker)


def rows(spark, settings) -> list[tuple]:
    return sorted(tuple(r) for r in read_master(spark, settings).collect())


def folder_files(fs: WebHdfs, path: str) -> list[str]:
    return [n for n in fs.list(path) if n.endswith(".parquet")]


def test_compaction_rewrites_finished_hours_and_every_read_stays_the_same(settings, stack, spark, scratch, tmp_path):
    scratch, root = scratch
    now_hour = int(time.time() * 1000) // HOUR_MS * HOUR_MS
    first = now_hour - 4 * HOUR_MS  # hours first … first+3: the last one is still being written
    archive(spark, scratch, root, tmp_path / "in", first, 4)
    master = scratch.archiver.master_path
    with WebHdfs(settings) as fs:
        assert all(len(folder_files(fs, f"{master}/{hour_dir(first + k * HOUR_MS)}")) == FILES for k in range(4))
    complete_before(scratch, first + 3 * HOUR_MS + 60_000)
    before = rows(spark, scratch)
    assert len(before) == FILES * 4 * PER_HOUR

    # Two at once take turns: one compacts, the other then finds nothing left to do.
    with ThreadPoolExecutor(2) as pool:
        both = list(pool.map(lambda _: compact_master(scratch, spark=spark), range(2)))
    done, other = sorted(both, key=lambda r: -r.rows)
    assert other.compacted_hours == [] and other.rows == 0 and other.through_ms == done.through_ms, both
    assert done.compacted_hours == [first, first + HOUR_MS, first + 2 * HOUR_MS]
    assert done.rows == FILES * 3 * PER_HOUR and done.through_ms == first + 3 * HOUR_MS
    assert done.originals_kept_for == [] and len(done.originals_deleted) == 3, done
    with WebHdfs(settings) as fs:
        for k in range(3):
            assert len(folder_files(fs, f"{compacted_path(scratch)}/{hour_dir(first + k * HOUR_MS)}")) == 1
            assert fs.list(f"{master}/{hour_dir(first + k * HOUR_MS)}") == [], "its originals are deleted"
        assert len(folder_files(fs, f"{master}/{hour_dir(first + 3 * HOUR_MS)}")) == FILES, "the open hour stays"
    assert rows(spark, scratch) == before

    again = compact_master(scratch, spark=spark)
    assert again.compacted_hours == [] and again.rows == 0 and again.through_ms == done.through_ms
    assert rows(spark, scratch) == before

    # A compaction killed after it moved an hour in but before its marker passed it left a folder no
    # read looks at; the next one replaces it.
    last = first + 3 * HOUR_MS
    with WebHdfs(settings) as fs:
        original = folder_files(fs, f"{master}/{hour_dir(last)}")[0]
        fs.mkdirs(f"{compacted_path(scratch)}/{hour_dir(last)}")
        data = fs.read(f"{master}/{hour_dir(last)}/{original}")
        assert data is not None
        fs.write(f"{compacted_path(scratch)}/{hour_dir(last)}/{original}", data)
    assert rows(spark, scratch) == before
    complete_before(scratch, last + HOUR_MS)
    final = compact_master(scratch, spark=spark)
    assert final.compacted_hours == [last] and final.rows == FILES * PER_HOUR
    assert rows(spark, scratch) == before, "the leftover was replaced, not read beside the compacted hour"
    with WebHdfs(settings) as fs:
        assert len(folder_files(fs, f"{compacted_path(scratch)}/{hour_dir(last)}")) == 1

    # A record stamped into a compacted hour after the completeness passed it (a broker's clock set
    # back): its hour's original folder comes back; compaction keeps it, says so and fails.
    late = {"event_id": "late", "event_time": "x", "url": "/late", "event_type": "page_view", "kafka_partition": 0}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((first + 600_000) / 1000))
    late.update(event_time=stamp, ingest_time=stamp, kafka_offset=10**6)
    (tmp_path / "in" / "part-late.json").write_text(json.dumps(late))
    drain(spark, scratch, root, tmp_path / "in")
    with WebHdfs(settings) as fs:
        fs.mkdirs(f"{compacted_path(scratch)}/_tmp-killed/ingest_date=2026-01-01")  # a killed run's copy
    with pytest.raises(CompactionMismatch, match=hour_dir(first).split("/")[0][12:]) as mismatch:
        compact_master(scratch, spark=spark)
    assert mismatch.value.result.mismatched == [first]
    with WebHdfs(settings) as fs:
        assert fs.list(f"{master}/{hour_dir(first)}"), "the originals that hold the late record are kept"
        assert not any(n.startswith("_tmp-") for n in fs.list(compacted_path(scratch))), "a killed run's copy is swept"
    assert rows(spark, scratch) == before, "reads take the compacted copy (the late record is not in it)"

    # A marker restored by hand with a wrong time, past what the archiver finished: every read took the
    # hours before it from _compacted/, which does not hold them, and left them out with no error.
    with WebHdfs(settings) as fs:
        good = fs.read(marker_path(scratch))
        marker = read_compacted(fs, scratch)
        assert good is not None and marker is not None
        wrong = Compacted(marker.through_ms + 24 * HOUR_MS, marker.compacted_ms, marker.deleted_before_ms)
        fs.write(marker_path(scratch), wrong.to_json())
    with pytest.raises(CompactionMarkerMalformed, match=AHEAD):
        read_master(spark, scratch)
    with WebHdfs(settings) as fs:
        fs.write(marker_path(scratch), good)
    assert rows(spark, scratch) == before

    # The completeness behind the compacted hours: a master rebuilt without its _compacted folder.
    complete_before(scratch, first + HOUR_MS)
    with pytest.raises(CompactionRefused, match="behind the compacted hours"):
        compact_master(scratch, spark=spark)
    with pytest.raises(CompactionMarkerMalformed, match=AHEAD):
        read_master(spark, scratch)

    with WebHdfs(settings) as fs:
        fs.write(marker_path(scratch), b'{"format": 1, "through_ms": "soon"}')
    with pytest.raises(CompactionMarkerMalformed, match=marker_path(scratch)):
        read_master(spark, scratch)
    with pytest.raises(CompactionMarkerMalformed, match=marker_path(scratch)):
        compact_master(scratch, spark=spark)
    with WebHdfs(settings) as fs:
        fs.delete(marker_path(scratch))
    with pytest.raises(CompactionMarkerMalformed, match="is missing"):
        read_master(spark, scratch)


def test_the_sink_log_forgets_old_files_and_hours_it_forgot_files_of_are_read_from_their_folders(
    settings, stack, spark, scratch, tmp_path, monkeypatch
):
    """The file sink's log would list every file ever archived (~35,000 a day, rewritten whole every
    few batches): it forgets old files when it rewrites itself. Reads and compaction read an hour
    holding files it does not list that are older than it could have forgotten from its folder: every
    record once (a killed batch's second copy of some, and a file cut short, not counted)."""
    scratch, root = scratch
    first = (int(time.time() * 1000) // HOUR_MS - 100) * HOUR_MS
    spark.conf.set("spark.sql.streaming.fileSink.log.compactInterval", "2")  # rewritten at batches 1, 3, 5…
    try:
        archive(spark, scratch, root, tmp_path / "in", first, 3, retention="1ms")
        # One more batch after the last rewrite: the log lists its files, and only those.
        extra = [
            {"event_id": f"x-{h}", "url": "/x", "event_type": "page_view", "kafka_partition": 0}
            | {"kafka_offset": 10**6 + h, "event_time": _iso_s(first + h * HOUR_MS + 1_800_000)}
            | {"ingest_time": _iso_s(first + h * HOUR_MS + 1_800_000)}
            for h in range(3)
        ]
        (tmp_path / "in" / "part-extra.json").write_text("\n".join(json.dumps(r) for r in extra))
        drain(spark, scratch, root, tmp_path / "in", retention="1ms")
    finally:
        spark.conf.unset("spark.sql.streaming.fileSink.log.compactInterval")
    master = scratch.archiver.master_path
    expected = sorted(
        [f"e-{f}-{h}-{i}" for f in range(FILES) for h in range(3) for i in range(PER_HOUR)]
        + [r["event_id"] for r in extra]
    )
    listed = read_archived(spark, master_url(scratch)).inputFiles()
    folders = [f"{master}/{hour_dir(first + k * HOUR_MS)}" for k in range(3)]
    with WebHdfs(settings) as fs:
        assert sum(len(folder_files(fs, folder)) for folder in folders) == (FILES + 1) * 3 and len(listed) == 3, listed
        # A killed batch's leftovers, which the log never listed: a copy of a file (its records
        # written again by the retry) and a file cut short.
        data = fs.read(f"{folders[0]}/{folder_files(fs, folders[0])[0]}")
        assert data is not None
        fs.write(f"{folders[0]}/part-99998-killed.c000.snappy.parquet", data)
        fs.write(f"{folders[1]}/part-99999-cut.c000.snappy.parquet", data[: len(data) // 2])
    assert sorted(r["event_id"] for r in read_master(spark, scratch).collect()) != expected, (
        "files written a moment ago are a killed batch's for all a read knows: read through the log"
    )
    with WebHdfs(settings) as fs:  # a day and more later (as the log counts time: the files' modification time)
        for folder in folders:
            for name in folder_files(fs, folder):
                fs.client.set_times(f"{folder}/{name}", modification_time=int(time.time() * 1000) - 30 * HOUR_MS)
    assert sorted(r["event_id"] for r in read_master(spark, scratch).collect()) == expected

    complete_before(scratch, first + 3 * HOUR_MS)

    # A compaction between a read's listing of the hours and its look into their folders (a report or
    # a replay, which hold no deletion back as a batch run does): the folders are gone, and the files
    # the log forgot with them. The read sees the marker moved and lists the master again.
    # That compaction runs on a host whose clock is far behind: it takes the files the log forgot for
    # too young to be forgotten, yet copies them, as it reads every hour holding a file the log does
    # not list from its folder (a copy without them would be what every read takes from then on).
    made: list = []
    real_read_live = master_live.read_live

    def compacted_meanwhile(*args, **kwargs):
        if not made:
            made.append(None)  # compaction reads the master too
            with monkeypatch.context() as behind:
                behind.setattr(master_live, "FORGETTABLE_AFTER_MS", master_live.FORGETTABLE_AFTER_MS + 10 * HOUR_MS)
                made[0] = compact_master(scratch, spark=spark)
        return real_read_live(*args, **kwargs)

    monkeypatch.setattr(master_live, "read_live", compacted_meanwhile)
    assert sorted(r["event_id"] for r in read_master(spark, scratch).collect()) == expected
    monkeypatch.undo()
    (done,) = made
    assert done.from_folders == [first, first + HOUR_MS, first + 2 * HOUR_MS], done
    assert done.rows == len(expected) and len(done.originals_deleted) == 3, done
    assert sorted(r["event_id"] for r in read_master(spark, scratch).collect()) == expected


def _iso_s(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def test_an_hour_read_from_its_folder_keeps_the_committed_copy_of_a_record_not_a_killed_batchs(
    settings, stack, spark, scratch, tmp_path
):
    """An upgrade's first archiver batch killed after it wrote a complete file: the code before the
    upgrade did not write the field schema_version 2 added, and its retry wrote the same Kafka
    positions with it. Compaction reads that hour from its folder (it holds a file the log does not
    list): every record once, with the retry's field, not the killed batch's copy without it."""
    scratch, root = scratch
    first = (int(time.time() * 1000) // HOUR_MS - 2) * HOUR_MS
    records = [
        {"event_id": f"v2-{i}", "url": "/v2", "event_type": "page_view", "kafka_partition": 0, "kafka_offset": i}
        | {"event_time": _iso_s(first + i * 1000), "ingest_time": _iso_s(first + i * 1000), "channel": "app"}
        for i in range(PER_HOUR)
    ]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-0.json").write_text("\n".join(json.dumps(r) for r in records))
    drain(spark, scratch, root, tmp_path / "in", source=f"{SOURCE}, channel STRING")
    folder = f"{scratch.archiver.master_path}/{hour_dir(first)}"
    with WebHdfs(settings) as fs:
        (committed,) = folder_files(fs, folder)
    # The killed batch's complete file: the same positions, no channel column; written uncompressed,
    # so larger, so Spark reads it before the committed one.
    killed = f"{root}/killed"
    spark.read.parquet(f"{settings.hdfs.url}{folder}/{committed}").drop("channel").coalesce(1).write.option(
        "compression", "none"
    ).parquet(f"{settings.hdfs.url}{killed}")
    with WebHdfs(settings) as fs:
        (name,) = folder_files(fs, killed)
        data = fs.read(f"{killed}/{name}")
        assert data is not None
        fs.write(f"{folder}/part-00000-killed-before-the-upgrade.c000.parquet", data)
        assert len(folder_files(fs, folder)) == 2
    complete_before(scratch, first + HOUR_MS, batch=0)

    done = compact_master(scratch, spark=spark)
    assert done.compacted_hours == [first] and done.from_folders == [first] and done.rows == PER_HOUR, done
    read = read_master(spark, scratch).collect()
    assert sorted((r["event_id"], r["channel"]) for r in read) == sorted((r["event_id"], "app") for r in records)


def test_a_file_copied_into_an_hour_by_hand_is_named_and_kept_not_compacted(settings, stack, spark, scratch, tmp_path):
    """A backfill export copied into an hour's folder: compaction read the hour whole (a file the log
    does not list) and took its rows unvalidated, all but one of them dropped (they had no Kafka
    position, so they were one record to it), then deleted the file with the hour's originals. A
    file whose rows have positions but another hour's ingest time is no archiver's either."""
    scratch, root = scratch
    first = (int(time.time() * 1000) // HOUR_MS - 2) * HOUR_MS
    records = [
        {"event_id": f"a-{i}", "url": "/a", "event_type": "page_view", "kafka_partition": 0, "kafka_offset": i}
        | {"event_time": _iso_s(first + i * 1000), "ingest_time": _iso_s(first + i * 1000)}
        for i in range(PER_HOUR)
    ]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-0.json").write_text("\n".join(json.dumps(r) for r in records))
    drain(spark, scratch, root, tmp_path / "in")
    folder = f"{scratch.archiver.master_path}/{hour_dir(first)}"
    before = rows(spark, scratch)
    exports = {
        "backfill": spark.createDataFrame(
            [(f"b-{i}", "/b", "page_view") for i in range(10)], "event_id STRING, url STRING, event_type STRING"
        ).selectExpr("*", f"timestamp_millis({first}) AS event_time"),
        "other_hour": read_archived(spark, f"{settings.hdfs.url}{folder}", base=master_url(scratch)).selectExpr(
            "* EXCEPT (ingest_date, ingest_hour, ingest_time)",
            f"timestamp_millis({first + 3 * HOUR_MS}) AS ingest_time",
        ),
    }
    with WebHdfs(settings) as fs:
        for label, frame in exports.items():
            frame.coalesce(1).write.parquet(f"{settings.hdfs.url}{root}/{label}")
            (name,) = folder_files(fs, f"{root}/{label}")
            data = fs.read(f"{root}/{label}/{name}")
            assert data is not None
            fs.write(f"{folder}/part-00000-{label}.c000.snappy.parquet", data)
        present = sorted(folder_files(fs, folder))
    complete_before(scratch, first + HOUR_MS, batch=0)

    with pytest.raises(CompactionRefused) as refused:
        compact_master(scratch, spark=spark)
    for label in exports:
        assert f"{folder}/part-00000-{label}.c000.snappy.parquet" in str(refused.value)
    assert "did not write" in str(refused.value) and "through Kafka" in str(refused.value)
    with WebHdfs(settings) as fs:
        assert sorted(folder_files(fs, folder)) == present, "every file kept"
        marker = read_compacted(fs, scratch)
        assert marker is None or marker.through_ms == first, "nothing compacted"
        for label in exports:
            fs.delete(f"{folder}/part-00000-{label}.c000.snappy.parquet")
    assert rows(spark, scratch) == before
    done = compact_master(scratch, spark=spark)
    assert done.compacted_hours == [first] and done.rows == PER_HOUR, done
    assert rows(spark, scratch) == before


def test_files_the_log_lists_that_were_deleted_are_named_and_nothing_is_compacted_past_them(
    settings, stack, spark, scratch, tmp_path
):
    """Old hours pruned by hand before compaction reached them: batch runs failed naming a missing
    file, as they should; compaction then began at the first folder still there, moved its marker
    past the pruned hours, and every later read left their records out without a word."""
    scratch, root = scratch
    first = (int(time.time() * 1000) // HOUR_MS - 4) * HOUR_MS
    archive(spark, scratch, root, tmp_path / "in", first, hours=3)
    master = scratch.archiver.master_path
    with WebHdfs(settings) as fs:
        pruned = sorted(f"{master}/{hour_dir(first)}/{n}" for n in folder_files(fs, f"{master}/{hour_dir(first)}"))
        assert len(pruned) == FILES
        fs.delete(f"{master}/{hour_dir(first)}", recursive=True)  # the oldest hour, folder and all
        one = sorted(folder_files(fs, f"{master}/{hour_dir(first + HOUR_MS)}"))[0]
        fs.delete(f"{master}/{hour_dir(first + HOUR_MS)}/{one}")  # and one file of the next
    complete_before(scratch, first + 3 * HOUR_MS)

    with pytest.raises(CompactionRefused) as refused:
        compact_master(scratch, spark=spark)
    message = str(refused.value)
    assert "lists files of the master dataset that are gone" in message and "restore them" in message
    for path in [*pruned, f"{master}/{hour_dir(first + HOUR_MS)}/{one}"]:
        assert path in message
    with WebHdfs(settings) as fs:
        assert fs.read(marker_path(scratch)) is None, "nothing compacted"
        assert len(folder_files(fs, f"{master}/{hour_dir(first + 2 * HOUR_MS)}")) == FILES, "originals kept"


def test_a_file_written_into_an_original_while_it_is_counted_keeps_the_folder(
    settings, stack, spark, scratch, tmp_path, monkeypatch
):
    """The originals were listed and counted (a Spark job: minutes on a busy hour), then deleted whole:
    a record stamped into the hour meanwhile (a broker's clock stepped back) went with them, never
    copied; a moment earlier it made the run keep them (CompactionMismatch)."""
    from batch_layer import compaction

    scratch, root = scratch
    first = (int(time.time() * 1000) // HOUR_MS - 3) * HOUR_MS
    archive(spark, scratch, root, tmp_path / "in", first, hours=1)
    folder = f"{scratch.archiver.master_path}/{hour_dir(first)}"
    late = f"{folder}/part-00099-late.c000.snappy.parquet"
    real_read_days = compaction.read_days

    def read_days(session, path, days):
        if path.endswith("/_compacted"):  # the copy's count, after the originals' (_drop_originals)
            with WebHdfs(settings) as fs:
                data = fs.read(f"{folder}/{folder_files(fs, folder)[0]}")
                assert data is not None
                fs.write(late, data)
        return real_read_days(session, path, days)

    monkeypatch.setattr(compaction, "read_days", read_days)
    complete_before(scratch, first + HOUR_MS)
    with pytest.raises(CompactionMismatch) as kept:
        compact_master(scratch, spark=spark)
    assert kept.value.result.mismatched == [first] and kept.value.result.originals_deleted == []
    with WebHdfs(settings) as fs:
        assert fs.read(late) is not None, "the late file is still there"


def test_a_file_copied_in_by_hand_after_its_hour_was_compacted_keeps_the_originals(
    settings, stack, spark, scratch, tmp_path, monkeypatch
):
    """The originals are read from their folders before they go: a foreign file there (copied in
    after the hour was compacted, its originals kept for a batch run) failed the run as a fault of
    the stack's. The hour's originals are kept and named, as for any record the copy lacks."""
    from batch_layer import compaction
    from stores.master_live import ForeignMasterFiles

    scratch, root = scratch
    first = (int(time.time() * 1000) // HOUR_MS - 3) * HOUR_MS
    archive(spark, scratch, root, tmp_path / "in", first, hours=1)
    real = compaction._committed

    def committed(settings_, spark_, hours, every=False, any_age=False):
        if every:  # the originals' count, after the copy
            raise ForeignMasterFiles("the master dataset holds files the archiver did not write: /x/part-1.parquet")
        return real(settings_, spark_, hours, every, any_age)

    monkeypatch.setattr(compaction, "_committed", committed)
    complete_before(scratch, first + HOUR_MS)
    with pytest.raises(CompactionMismatch) as kept:
        compact_master(scratch, spark=spark)
    assert kept.value.result.mismatched == [first] and kept.value.result.originals_deleted == []
    with WebHdfs(settings) as fs:
        assert len(folder_files(fs, f"{scratch.archiver.master_path}/{hour_dir(first)}")) == FILES


def test_after_an_hour_is_kept_the_next_compaction_counts_only_the_hours_it_checks(
    settings, stack, spark, scratch, tmp_path, monkeypatch
):
    """An hour kept (a file written into it while it was counted) holds the deletion mark at it. The
    next run counted every hour from it to the newest, and the file sink's log still lists the files
    of the hours between, whose originals were deleted: every later compaction failed reading them
    (FileNotFound), and the kept hour was never cleared."""
    from batch_layer import compaction

    scratch, root = scratch
    first = (int(time.time() * 1000) // HOUR_MS - 6) * HOUR_MS
    archive(spark, scratch, root, tmp_path / "in", first, hours=4)
    before = rows(spark, scratch)
    folder = f"{scratch.archiver.master_path}/{hour_dir(first)}"
    real_read_days = compaction.read_days
    written = []

    def read_days(session, path, days):
        if path.endswith("/_compacted") and not written:  # a copy of one of its files: the same records
            with WebHdfs(settings) as fs:
                data = fs.read(f"{folder}/{folder_files(fs, folder)[0]}")
                assert data is not None
                fs.write(f"{folder}/part-00099-late.c000.snappy.parquet", data)
            written.append(True)
        return real_read_days(session, path, days)

    monkeypatch.setattr(compaction, "read_days", read_days)
    complete_before(scratch, first + 3 * HOUR_MS)
    with pytest.raises(CompactionMismatch) as kept:
        compact_master(scratch, spark=spark)
    assert kept.value.result.mismatched == [first] and len(kept.value.result.originals_deleted) == 2

    complete_before(scratch, first + 4 * HOUR_MS)
    done = compact_master(scratch, spark=spark)  # the kept hour and the next: not the hours between
    assert done.compacted_hours == [first + 3 * HOUR_MS] and done.mismatched == []
    assert sorted(done.originals_deleted) == [folder, f"{scratch.archiver.master_path}/{hour_dir(first + 3 * HOUR_MS)}"]
    assert rows(spark, scratch) == before


def test_a_compaction_that_lost_its_lease_while_paused_leaves_what_the_next_one_committed(
    settings, stack, spark, scratch, tmp_path, monkeypatch
):
    """One paused just past its last check (a stop, a suspend) for longer than its lease, then went on.
    The one that took over had swept its copy folder, compacted the same hour and moved the marker;
    the first then deleted that committed hour as a killed run's leftover and failed on its own move:
    the marker said the hour was compacted, `_compacted/` no longer held it, its originals were gone."""
    from batch_layer import compaction

    scratch, root = scratch
    first = (int(time.time() * 1000) // HOUR_MS - 3) * HOUR_MS
    archive(spark, scratch, root, tmp_path / "in", first, hours=1)
    complete_before(scratch, first + HOUR_MS)
    copies = compacted_path(scratch)
    target = f"{copies}/{hour_dir(first)}"
    real = compaction.read_compacted
    calls: list[int] = []

    def read_compacted(fs, settings_):
        marker = real(fs, settings_)
        calls.append(1)
        if len(calls) == 2:  # the copy's last check before it moves hours in: the other one runs now
            for name in fs.list(copies):
                if name.startswith("_tmp-"):
                    fs.delete(f"{copies}/{name}", recursive=True)  # its sweep of killed runs' copies
            fs.mkdirs(target)
            fs.write(f"{target}/part-committed.parquet", b"the other one's")  # what it committed
        return marker

    monkeypatch.setattr(compaction, "read_compacted", read_compacted)
    with pytest.raises(CompactionRefused, match="another compaction took over"):
        compact_master(scratch, spark=spark)
    with WebHdfs(settings) as fs:
        assert fs.read(f"{target}/part-committed.parquet") == b"the other one's"
