"""The archiver refuses to start on a checkpoint with no committed batch beside a master dataset that
holds archived batches (a deleted or lost checkpoint): Spark's file sink would skip the records of
the new checkpoint's first batches, as batches it already committed."""

from __future__ import annotations

import logging
import uuid

import pytest

from ingest.archiver import check_checkpoint_kept
from stores.webhdfs import WebHdfs


def with_archiver(settings, **changes):
    return settings.model_copy(update={"archiver": settings.archiver.model_copy(update=changes)})


def test_a_lost_checkpoint_beside_an_archived_master_dataset_stops_the_archiver(settings, stack, caplog):
    unique = uuid.uuid4().hex[:8]
    lost = with_archiver(settings, checkpoint_dir=f"/lambda/test/lost-{unique}")
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as stopped:
        check_checkpoint_kept(lost)
    assert stopped.value.code == 1
    said = caplog.text
    assert f"/lambda/test/lost-{unique}/master" in said and settings.archiver.master_path in said
    assert "skip" in said and "restore" in said

    # A checkpoint restored from an older copy: it planned fewer batches than the sink committed.
    old = with_archiver(settings, checkpoint_dir=f"/lambda/test/old-{unique}")
    with WebHdfs(settings) as fs:
        fs.write(f"/lambda/test/old-{unique}/master/offsets/0", b"v1\n{}\n")
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit):
        check_checkpoint_kept(old)
    assert "has planned batches up to 0" in caplog.text

    check_checkpoint_kept(settings)  # the stack's own checkpoint: it starts
    fresh = with_archiver(
        settings,
        checkpoint_dir=f"/lambda/test/new-{unique}/checkpoints",
        master_path=f"/lambda/test/new-{unique}/master",
    )
    check_checkpoint_kept(fresh)  # a new platform: nothing archived yet

    # The stack's checkpoint (batches committed) with another master_path: its archive is elsewhere.
    moved = with_archiver(settings, master_path=f"/lambda/test/moved-{unique}/master")
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit):
        check_checkpoint_kept(moved)
    assert "holds no batch" in caplog.text and f"/lambda/test/moved-{unique}/master" in caplog.text


def test_markers_of_an_earlier_checkpoint_are_dropped_when_the_archiver_starts_on_a_new_one(settings, stack):
    """The master rebuilt from Kafka (its dataset and checkpoint removed): the newest marker was the
    old archive's, batch 873 complete up to its time, so a batch run took a cutoff the new archive
    had not reached. Real HDFS, paths of the test's own."""
    from stores import completeness

    unique = uuid.uuid4().hex[:8]
    root = f"/lambda/test/markers-{unique}"
    mine = with_archiver(
        settings,
        checkpoint_dir=f"{root}/checkpoints",
        master_path=f"{root}/events",
        completeness_path=f"{root}/completeness",
    )
    old = completeness.Completeness(873, 1, {0: completeness.PartitionProgress(10, 1_800_000_000_000)}, 1)
    completeness.publish(mine, old)
    assert completeness.latest(mine) == old
    try:
        planned = check_checkpoint_kept(mine)  # a new checkpoint: nothing planned yet
        assert planned is None
        assert completeness.drop_beyond(mine, planned) == ["000000000873.json"]
        assert completeness.latest(mine) is None, "no marker says more than the new archive holds"
        new = completeness.Completeness(2, 1, {0: completeness.PartitionProgress(3, 1_700_000_000_000)}, 1)
        completeness.publish(mine, new)
        with WebHdfs(settings) as fs:
            for batch in range(3):
                fs.write(f"{root}/checkpoints/master/offsets/{batch}", b"v1\n{}\n")
                fs.write(f"{root}/events/_spark_metadata/{batch}", b"v1\n")
        assert completeness.drop_beyond(mine, check_checkpoint_kept(mine)) == [], "its own markers stay"
        assert completeness.latest(mine) == new
    finally:
        with WebHdfs(settings) as fs:
            fs.delete(root, recursive=True)


def test_a_master_dataset_restored_from_an_older_copy_stops_the_archiver(settings, stack, caplog):
    """The checkpoint committed batches the restored master dataset does not hold (its file sink logs
    a batch before the checkpoint commits it): resumed, the archiver would go on after them, and
    their records would never be archived again while the completeness markers claim them."""
    unique = uuid.uuid4().hex[:8]
    root = f"/lambda/test/restored-{unique}"
    mine = with_archiver(settings, checkpoint_dir=f"{root}/checkpoints", master_path=f"{root}/events")
    try:
        with WebHdfs(settings) as fs:
            for batch in range(7):
                fs.write(f"{root}/checkpoints/master/offsets/{batch}", b"v1\n{}\n")
                fs.write(f"{root}/checkpoints/master/commits/{batch}", b"v1\n{}\n")
            for batch in range(4):
                fs.write(f"{root}/events/_spark_metadata/{batch}", b"v1\n")
        with caplog.at_level(logging.ERROR), pytest.raises(SystemExit):
            check_checkpoint_kept(mine)
        said = caplog.text
        assert "committed batches up to 6" in said and "holds batches 0 to 3" in said and root in said, said
        with WebHdfs(settings) as fs:
            for batch in range(4, 7):  # the sink logged them: an ordinary restart
                fs.write(f"{root}/events/_spark_metadata/{batch}", b"v1\n")
        assert check_checkpoint_kept(mine) == 6
    finally:
        with WebHdfs(settings) as fs:
            fs.delete(root, recursive=True)
