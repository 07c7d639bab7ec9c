"""Kafka's retention deletes records the archiver had not read while it was down: the archiver stops,
naming the lost offsets, at every start (its Kafka source would fail without saying which records
were lost); the operator accepts the loss (`lambdactl accept-loss archiver`) and it runs on from
what Kafka keeps, the loss on record."""

from __future__ import annotations

import json

from kafka import KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient

from infra.stack import Stack
from ingest.generator import GeneratorConfig
from stores import kafka_gaps
from stores.checkpoints import speed_layer_position
from stores.webhdfs import WebHdfs
from tests.support.cli import lambdactl
from tests.support.events import end_offsets, fresh_seed, send, wait_archived
from tests.support.polling import wait_for


def archiver_position(settings, partition: int) -> int:
    with WebHdfs(settings) as fs:
        master = kafka_gaps.checkpoint_dirs(settings, "archiver")[0]
        return (kafka_gaps.committed_position(fs, master, settings.kafka.events_topic) or {})[partition]


def loss_records(settings) -> list[dict]:
    root = f"{kafka_gaps.checkpoint_dirs(settings, 'archiver')[0]}-losses"
    with WebHdfs(settings) as fs:
        return [json.loads(fs.read(f"{root}/{name}") or b"{}") for name in fs.list(root)]


def test_records_deleted_before_the_archiver_read_them_stop_it_until_the_loss_is_accepted(settings, stack):
    supervisor, topic, p = stack.supervisord, settings.kafka.events_topic, 0
    log_file = settings.state_dir / "logs" / "archiver.log"
    losses_before = len(loss_records(settings))
    supervisor.stop("archiver")
    try:
        first_lost = archiver_position(settings, p)
        producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap, acks="all")
        for i in range(3):
            producer.send(topic, key=b"u-lost", value=f"lost {i}".encode(), partition=p)
        producer.flush()
        producer.close()
        first_kept = end_offsets(settings)[p]
        # The speed layer has read them (it is not what this test loses), then retention "deletes" them.
        wait_for(
            lambda: (speed_layer_position(settings) or {}).get(p, 0) >= first_kept,
            "the speed layer to read them",
            timeout_s=60,
        )
        admin = KafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap)
        admin.delete_records({TopicPartition(topic, p): first_kept})
        admin.close()

        expected = [
            kafka_gaps.Gap(checkpoint, p, first_lost, first_kept)
            for checkpoint in kafka_gaps.checkpoint_dirs(settings, "archiver")
        ]
        assert kafka_gaps.gaps(settings, "archiver")[0] == expected[0]
        said_before = log_file.read_text(errors="replace") if log_file.exists() else ""
        supervisor.start("archiver")
        named = f"partition {p}: offsets {first_lost} to {first_kept - 1}"
        wait_for(
            lambda: named in log_file.read_text(errors="replace")[len(said_before) :],
            "the archiver to stop, naming the lost offsets",
            timeout_s=120,
        )
        assert "lambdactl accept-loss archiver" in log_file.read_text(errors="replace")[len(said_before) :]
        assert len(loss_records(settings)) == losses_before, "nothing is recorded lost before it is accepted"
    finally:
        accepted = lambdactl(settings, "accept-loss", "archiver", "--json")
        Stack(settings).up()  # starts the archiver again (the restart listener may have given it up)
    assert accepted.returncode == 0, accepted.stderr
    doc = json.loads(accepted.stdout.strip().splitlines()[-1])
    assert [g for g in doc["accepted"] if g["partition"] == p][:1] == [
        {"checkpoint": expected[0].checkpoint, "partition": p, "first_lost": first_lost, "first_kept": first_kept}
    ]

    # It runs on: new records are archived, the loss is on record, the acceptance is used up.
    sent = send(settings, GeneratorConfig(seed=fresh_seed(), count=200))
    wait_archived(settings, sent)
    recorded = loss_records(settings)[losses_before:]
    assert len(recorded) == 1 and recorded[0]["job"] == "archiver"
    assert {(g["partition"], g["first_lost"], g["first_kept"]) for g in recorded[0]["gaps"]} >= {
        (p, first_lost, first_kept)
    }
    assert kafka_gaps.gaps(settings, "archiver") == []
    again = lambdactl(settings, "accept-loss", "archiver")
    assert again.returncode == 0 and "lost nothing" in again.stderr
