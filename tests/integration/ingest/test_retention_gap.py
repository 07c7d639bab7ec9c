"""Kafka's retention deletes records a streaming job had not read while it was down: the job stops at
its start, naming the lost offsets (its Kafka source would fail at every restart without saying
which records were lost); the operator accepts the loss (`lambdactl accept-loss JOB`) and the job's
next start records it and runs on.

Real Kafka and HDFS, on a topic and checkpoints of the test's own: deleting records of `events`
would take the history other tests replay from. The checkpoint is what Spark leaves
(`offsets/N`, `commits/N`), written by the test."""

from __future__ import annotations

import json
import logging
import uuid

import pytest
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

from stores import kafka_gaps
from stores.kafka import producer
from stores.webhdfs import WebHdfs
from tests.support.cli import lambdactl
from tests.support.kafka_topics import scratch_topic


def commit_batch(settings, checkpoint: str, batch_id: int, topic: str, next_offset: int) -> None:
    """What a query's committed micro-batch leaves in its checkpoint: its end offsets, then its commit."""
    with WebHdfs(settings) as fs:
        fs.write(f"{checkpoint}/offsets/{batch_id}", f'v1\n{{}}\n{{"{topic}":{{"0":{next_offset}}}}}'.encode())
        fs.write(f"{checkpoint}/commits/{batch_id}", b'v1\n{"nextBatchWatermarkMs":0}')


def loss_records(settings, checkpoint: str) -> list[dict]:
    with WebHdfs(settings) as fs:
        return [json.loads(fs.read(f"{checkpoint}-losses/{n}") or b"{}") for n in fs.list(f"{checkpoint}-losses")]


def test_records_deleted_before_a_job_read_them_stop_it_until_the_loss_is_accepted(settings, stack, caplog):
    unique = uuid.uuid4().hex[:8]
    root = f"/lambda/test/gaps-{unique}"
    with scratch_topic(settings, f"test-gaps-{unique}") as topic:
        mine = settings.model_copy(
            update={
                "kafka": settings.kafka.model_copy(update={"events_topic": topic}),
                "archiver": settings.archiver.model_copy(update={"checkpoint_dir": root}),
            }
        )
        master, dlq = kafka_gaps.checkpoint_dirs(mine, "archiver")
        send = producer(mine, "test-gaps")
        for i in range(10):
            send.send(topic, value=f"record {i}".encode(), partition=0).get(timeout=30)
        send.close()
        commit_batch(mine, master, 0, topic, 4)  # the archiver read offsets 0-3, then stopped
        commit_batch(mine, dlq, 0, topic, 4)
        assert kafka_gaps.accepted_past(mine, "archiver") == [], "nothing lost: its source stays strict"

        admin = KafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap)
        admin.delete_records({TopicPartition(topic, 0): 7})  # retention: offsets 4-6 go unread
        admin.close()
        with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as stopped:
            kafka_gaps.accepted_past(mine, "archiver")
        assert stopped.value.code == 1
        assert f"partition 0: offsets 4 to 6 ({master})" in caplog.text
        assert "lambdactl accept-loss archiver" in caplog.text
        assert loss_records(mine, master) == [], "nothing is recorded lost before it is accepted"
        assert kafka_gaps.recorded_losses(mine, "archiver") == ()

        operator = {"LAMBDA_KAFKA__EVENTS_TOPIC": topic, "LAMBDA_ARCHIVER__CHECKPOINT_DIR": root}
        accepted = lambdactl(settings, "accept-loss", "archiver", "--json", extra_env=operator)
        assert accepted.returncode == 0, accepted.stderr
        assert json.loads(accepted.stdout.strip().splitlines()[-1])["accepted"] == [
            {"checkpoint": master, "partition": 0, "first_lost": 4, "first_kept": 7},
            {"checkpoint": dlq, "partition": 0, "first_lost": 4, "first_kept": 7},
        ]

        # Its next start runs past the gap, the loss on record; a start that fails before it got
        # past needs no new acceptance, and records the loss once.
        assert kafka_gaps.accepted_past(mine, "archiver") != []
        assert kafka_gaps.accepted_past(mine, "archiver") != []
        recorded = loss_records(mine, master)
        assert len(recorded) == 1 and recorded[0]["job"] == "archiver"
        assert [(g["partition"], g["first_lost"], g["first_kept"]) for g in recorded[0]["gaps"]] == [(0, 4, 7)] * 2
        # What answers are flagged with (the archiver's: for good): when it was recorded, records lost.
        assert kafka_gaps.recorded_losses(mine, "archiver") == ((recorded[0]["recorded_ms"], 3),)
        known: dict = {}  # as the API reads them: each record once
        for _ in range(2):
            assert kafka_gaps.recorded_losses(mine, "archiver", known) == ((recorded[0]["recorded_ms"], 3),)
        assert [path for path, _, _ in known] == [f"{master}-losses/{recorded[0]['accepted_ms']}.json"]

        # Retention deleting more before the job got past: a new acceptance, naming the larger gap.
        admin = KafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap)
        admin.delete_records({TopicPartition(topic, 0): 9})
        admin.close()
        with caplog.at_level(logging.ERROR), pytest.raises(SystemExit):
            kafka_gaps.accepted_past(mine, "archiver")
        assert f"partition 0: offsets 4 to 8 ({master})" in caplog.text

        # Once it committed past the gap, it is strict again and the acceptance is used up.
        commit_batch(mine, master, 1, topic, 10)
        commit_batch(mine, dlq, 1, topic, 10)
        assert kafka_gaps.accepted_past(mine, "archiver") == []
        again = lambdactl(settings, "accept-loss", "archiver", extra_env=operator)
        assert again.returncode == 0 and "lost nothing" in again.stderr
        with WebHdfs(settings) as fs:
            assert fs.read(f"{master}-accepted-loss.json") is None
            fs.delete(root, recursive=True)
