"""`lambdactl reset-speed` on the real HDFS, against a checkpoint of the test's own (the speed
layer said stopped): the marker and the checkpoint go, what sits beside them stays, and a second
run finds nothing to remove; a recorded replay refuses it."""

from __future__ import annotations

import argparse
import shutil

import pytest

from definitions.files import LockHeld, state_lock
from lambdactl.reset_speed import cmd_reset_speed
from stores import checkpoints, replays
from stores.webhdfs import WebHdfs
from tests.support.polling import wait_for


@pytest.fixture
def scratch(scratch, unique):
    """The checkpoint of the test's own, and a state folder of its own too: the stack's running speed
    layer holds the lock of the stack's, and a reset is refused there (the last test below)."""
    own = scratch.state_dir / f"test-reset-{unique}"
    yield scratch.model_copy(update={"state_dir": own})
    shutil.rmtree(own, ignore_errors=True)


def test_reset_removes_the_marker_and_the_checkpoint_and_nothing_beside(scratch, stack):
    base = scratch.speed.checkpoint_dir
    checkpoints.record_late_drops(scratch, 5_000, 2)  # beside the checkpoint: kept
    with WebHdfs(scratch) as fs:
        fs.write(f"{base}/commits/0", b"v1\n{}")
        fs.write(f"{base}/offsets/0", b"v1\n{}")
        fs.write(checkpoints.marker_path(scratch), b'{"ingest_bucket_s": 60}')
    args = argparse.Namespace(stopped=True, json=False)
    assert cmd_reset_speed(scratch, args) == 0
    with WebHdfs(scratch) as fs:
        assert fs.read(checkpoints.marker_path(scratch)) is None
        assert fs.list(base) == []
    assert checkpoints.read_late_drops(scratch) == (5_000, 2)
    assert checkpoints.remove_checkpoint(scratch) == [], "done twice: nothing left to remove"


def test_a_recorded_replay_keeps_the_checkpoint(scratch, stack):
    """A fresh start would empty the realtime tables the replay's rows answer beside: refused first."""
    base = scratch.speed.checkpoint_dir
    with WebHdfs(scratch) as fs:
        fs.write(f"{base}/commits/0", b"v1\n{}")
    replays.mark(scratch, "page_views", 1_000, 2_000, shadow="page_views_r2000")
    assert cmd_reset_speed(scratch, argparse.Namespace(stopped=True, json=False)) == 2
    with WebHdfs(scratch) as fs:
        assert fs.list(f"{base}/commits") == ["0"]


def test_a_reset_when_kafka_no_longer_holds_what_the_batch_has_not_absorbed_is_refused(scratch, stack, unique):
    """A fresh speed layer recomputes from Kafka's earliest offset: records from a view's batch cutoff
    on that retention deleted were then in no layer, and the answers said complete."""
    from kafka.structs import TopicPartition

    from stores.clients import kafka_admin
    from tests.support.kafka_topics import scratch_topic

    with scratch_topic(scratch, f"test-reset-{unique}") as topic:
        settings = scratch.model_copy(update={"kafka": scratch.kafka.model_copy(update={"events_topic": topic})})
        _send(settings, topic, 5)
        base = settings.speed.checkpoint_dir
        with WebHdfs(settings) as fs:
            fs.write(f"{base}/commits/0", b"v1\n{}")
        admin = kafka_admin(settings, client_id="test-reset")
        try:
            admin.delete_records({TopicPartition(topic, 0): 3})  # retention: records newer than any cutoff
        finally:
            admin.close()
        assert cmd_reset_speed(settings, argparse.Namespace(stopped=True, json=False)) == 2
        with WebHdfs(settings) as fs:
            assert fs.list(f"{base}/commits") == ["0"], "the checkpoint stays"


def test_a_reset_said_stopped_of_the_running_speed_layer_removes_nothing(scratch, settings, stack, caplog):
    """`--stopped` said of a speed layer that runs: its checkpoint was removed under it, and its next
    commits there made the next start refuse. The running one holds its state folder's lock."""

    def running() -> bool:
        try:
            with state_lock(settings.state_dir, "speed-layer.lock", "the speed layer", wait=False):
                return False
        except LockHeld:
            return True

    wait_for(running, timeout_s=300, what="the stack's speed layer holding its lock")
    beside = scratch.model_copy(update={"state_dir": settings.state_dir})  # the running one's folder
    base = beside.speed.checkpoint_dir
    with WebHdfs(beside) as fs:
        fs.write(f"{base}/commits/0", b"v1\n{}")
    assert cmd_reset_speed(beside, argparse.Namespace(stopped=True, json=False)) == 2
    assert "a speed layer still runs" in caplog.text, "refused for the running speed layer, not another reason"
    with WebHdfs(beside) as fs:
        assert fs.list(f"{base}/commits") == ["0"], "nothing was removed"


@pytest.mark.parametrize("topic", ["events-elsewhere", "checkpoint-of-another"])
def test_a_reset_of_a_topic_the_speed_layer_does_not_read_is_refused(scratch, stack, topic, caplog):
    """Another kafka.events_topic in the shell (no such topic), or a checkpoint that reads another
    topic than the settings name: the loss check read a topic with no partitions, or records the
    speed layer never read, found nothing lost, and the reset let a fresh start serve answers
    missing the records no batch run absorbed as exact."""
    base = scratch.speed.checkpoint_dir
    with WebHdfs(scratch) as fs:
        fs.write(f"{base}/commits/0", b"v1\n{}")
        fs.write(f"{base}/offsets/0", b'v1\n{"batchWatermarkMs":0,"batchTimestampMs":0}\n{"other-topic":{"0":5}}')
    if topic == "checkpoint-of-another":
        settings = scratch
        why = f"the speed layer's checkpoint reads no topic {scratch.kafka.events_topic}"
    else:
        settings = scratch.model_copy(update={"kafka": scratch.kafka.model_copy(update={"events_topic": topic})})
        why = f"topic {topic} has no partitions"
    assert cmd_reset_speed(settings, argparse.Namespace(stopped=True, json=False)) == 2
    assert why in caplog.text, caplog.text[-2000:]
    with WebHdfs(scratch) as fs:
        assert fs.list(f"{base}/commits") == ["0"], "nothing removed"


def test_a_reset_on_a_topic_made_again_counts_what_it_lost(scratch, stack, unique, caplog):
    """A topic deleted and made again starts its offsets at 0, read as "nothing deleted": the reset
    let a fresh start serve answers missing the old topic's unabsorbed records as exact. Now every
    record before the new topic's first is counted lost until a batch run's cutoff passes it."""
    from tests.support.kafka_topics import scratch_topic

    with scratch_topic(scratch, f"test-again-{unique}") as topic:
        settings = scratch.model_copy(update={"kafka": scratch.kafka.model_copy(update={"events_topic": topic})})
        _send(settings, topic, 3)
        base = settings.speed.checkpoint_dir
        with WebHdfs(settings) as fs:  # the speed layer had read 1,000 records of the topic before
            fs.write(f"{base}/commits/0", b"v1\n{}")
            fs.write(f"{base}/offsets/0", f'v1\n{{"batchWatermarkMs":0}}\n{{"{topic}":{{"0":1000}}}}'.encode())
        assert cmd_reset_speed(settings, argparse.Namespace(stopped=True, json=False)) == 2
        assert "partition 0 is of the topic made again" in caplog.text, caplog.text[-2000:]
        with WebHdfs(settings) as fs:
            assert fs.list(f"{base}/commits") == ["0"], "the checkpoint stays"


def _send(settings, topic: str, count: int) -> None:
    """`count` records to partition 0 of `topic`, each acknowledged."""
    from stores.kafka import producer

    send = producer(settings, "test-reset")
    try:
        for _ in range(count):
            send.send(topic, value=b"{}", partition=0).get(timeout=30)
    finally:
        send.close()
