"""Which losses an operator's acceptance covers (stores.kafka_gaps; no services needed)."""

from __future__ import annotations

import pytest

from definitions.settings import Settings
from stores.kafka_gaps import Gap, checkpoint_dirs, covered
from tests.support.dict_hdfs import DictHdfs

M, D = "/lambda/checkpoints/archiver/master", "/lambda/checkpoints/archiver/dlq"


def test_an_acceptance_covers_the_gaps_it_was_given_and_what_retention_deleted_less_of():
    accepted = [Gap(M, 0, 10, 50), Gap(D, 0, 12, 50)]
    assert covered(accepted, accepted)
    assert covered(accepted, [Gap(M, 0, 10, 40)])  # the gap found is within the one accepted
    assert covered(accepted, [])


@pytest.mark.parametrize(
    "found",
    [
        [Gap(M, 0, 10, 51)],  # retention deleted more since: a new acceptance
        [Gap(M, 1, 10, 50)],  # another partition
        [Gap(M, 0, 11, 50)],  # the checkpoint moved: another gap
        [Gap("/lambda/checkpoints/speed", 0, 10, 50)],  # another job's checkpoint
        [Gap(M, 0, 10, 50), Gap(M, 2, 0, 5)],  # one more partition lost
    ],
)
def test_a_loss_no_acceptance_names_is_not_covered(found):
    assert not covered([Gap(M, 0, 10, 50), Gap(D, 0, 12, 50)], found)


def test_each_streaming_job_names_its_checkpoints_and_nothing_else_is_one():
    settings = Settings()
    assert checkpoint_dirs(settings, "archiver") == [
        f"{settings.archiver.checkpoint_dir}/master",
        f"{settings.archiver.checkpoint_dir}/dlq",
    ]
    assert checkpoint_dirs(settings, "speed-layer") == [settings.speed.checkpoint_dir]
    with pytest.raises(ValueError, match="no streaming job 'api'"):
        checkpoint_dirs(settings, "api")
    assert Gap(M, 3, 7, 9).describe() == f"partition 3: offsets 7 to 8 ({M})"


def test_a_gap_is_where_a_checkpoint_resumes_below_what_kafka_keeps():
    from stores.kafka_gaps import missing

    positions = {M: {0: 10, 1: 30}, D: {0: 60, 1: 30}}
    assert missing(positions, {0: 50, 1: 30}) == [Gap(M, 0, 10, 50)]
    assert missing(positions, {0: 5, 1: 0}) == []
    assert missing({M: None, D: {0: 60}}, {0: 50}) == []  # not committed yet: read from the start


def test_a_partition_added_since_the_last_commit_whose_start_was_deleted_is_a_gap():
    """Spark's Kafka source fails on an added partition that starts after offset 0 ("Some data may
    have been missed"): the loss must be found, so it can be accepted, not fail every restart."""
    from stores.kafka_gaps import missing

    positions = {M: {0: 10}, D: {0: 10}}
    assert missing(positions, {0: 0, 1: 7}) == [Gap(M, 1, 0, 7), Gap(D, 1, 0, 7)]
    assert missing(positions, {0: 0, 1: 0}) == []  # added, nothing deleted: read from its start


class Query:
    def __init__(self, strict: bool) -> None:
        self.strict, self.isActive = strict, True

    def stop(self) -> None:
        self.isActive = False


def test_queries_run_past_an_accepted_gap_only_until_they_committed_past_it(monkeypatch):
    """After an accepted loss, the source skipped whatever Kafka deleted for the whole run: a loss
    while catching up (retention deleting more) went unseen, and completeness moved past it. Once
    every checkpoint is past the accepted gaps, the queries start again, failing on any loss."""
    import threading

    from stores import kafka_gaps

    past = [Gap(M, 0, 10, 50), Gap(D, 0, 12, 50)]
    positions = {M: {0: 10}, D: {0: 12}}
    looks: list[int] = []

    class Hdfs:
        def __init__(self, settings) -> None:
            pass

        def __enter__(self):
            looks.append(1)
            if len(looks) == 2:  # the master query got past; the dead letters' query not yet
                positions[M] = {0: 60}
            if len(looks) == 3:
                positions[D] = {0: 55}
            return self

        def __exit__(self, *exc) -> None:
            return None

    monkeypatch.setattr(kafka_gaps, "WebHdfs", Hdfs)
    monkeypatch.setattr(kafka_gaps, "committed_position", lambda fs, checkpoint, topic: positions[checkpoint])
    monkeypatch.setattr(kafka_gaps, "accepted_past", lambda settings, job: [])  # past it: used up
    first = [Query(False), Query(False)]
    started: list[bool] = []

    def start(strict: bool) -> list[Query]:
        started.append(strict)
        return [Query(strict), Query(strict)]

    running = kafka_gaps.strict_once_past(Settings(), "archiver", past, first, start, threading.Event(), check_s=0)
    assert len(looks) == 3, "not before every checkpoint was past its gap"
    assert started == [True] and all(q.strict and q.isActive for q in running)
    assert not any(q.isActive for q in first), "the queries that skip losses were stopped"


def test_without_an_accepted_gap_or_once_stopping_the_queries_are_left_as_they_are(monkeypatch):
    import threading

    from stores import kafka_gaps

    def never(*args):
        raise AssertionError("not started again")

    queries = [Query(True)]
    assert kafka_gaps.strict_once_past(Settings(), "archiver", [], queries, never, threading.Event()) is queries
    stopping = threading.Event()
    stopping.set()
    past = [Gap(M, 0, 10, 50)]
    assert kafka_gaps.strict_once_past(Settings(), "archiver", past, queries, never, stopping) is queries
    dead = [Query(False)]
    dead[0].isActive = False  # died: watch_queries reports it
    assert kafka_gaps.strict_once_past(Settings(), "archiver", past, dead, never, threading.Event()) is dead


@pytest.mark.parametrize("left", [b"", b'{"gaps": [', b"[]", b'{"gaps": []}'])
def test_an_acceptance_left_unreadable_is_named_and_gone_once_nothing_is_lost(monkeypatch, left):
    """A kill as `accept-loss` wrote its file left it empty (HDFS shows a file being written so):
    every start of the job then died on a bare JSON error, and `accept-loss` found nothing to write."""
    from stores import kafka_gaps

    settings = Settings()
    path = f"{checkpoint_dirs(settings, 'speed-layer')[0]}-accepted-loss.json"
    files = {path: left}
    monkeypatch.setattr(kafka_gaps, "WebHdfs", DictHdfs.over(files))
    monkeypatch.setattr(kafka_gaps, "gaps", lambda settings, job: [Gap(M, 0, 10, 50)])
    with pytest.raises(kafka_gaps.DataLost, match=f"{path} cannot be read.*accept-loss speed-layer` writes it again"):
        kafka_gaps.resume_check(settings, "speed-layer")
    kafka_gaps.accept(settings, "speed-layer", [Gap(M, 0, 10, 50)])  # written again, whole
    assert kafka_gaps.resume_check(settings, "speed-layer") == [Gap(M, 0, 10, 50)]
    files[path] = left
    monkeypatch.setattr(kafka_gaps, "gaps", lambda settings, job: [])  # nothing lost any more
    assert kafka_gaps.resume_check(settings, "speed-layer") == []
    assert path not in files


@pytest.mark.parametrize("served", [True, False])
def test_a_new_archive_beside_views_of_an_older_one_counts_what_kafka_deleted_as_lost(monkeypatch, served):
    """The master rebuilt from Kafka (its dataset and checkpoint removed) after retention deleted the
    topic's first records: the new archive silently lacked them, and the next batch run replaced
    every view with one missing them, answers saying complete. On a platform no batch ran on yet,
    what Kafka deleted before it started is no loss of the platform's."""
    from types import SimpleNamespace

    from definitions import jobs
    from stores import kafka, kafka_gaps, registry

    monkeypatch.setattr(kafka_gaps, "WebHdfs", DictHdfs.over({}))
    monkeypatch.setattr(kafka_gaps, "committed_position", lambda fs, checkpoint, topic: None)
    monkeypatch.setattr(kafka, "first_offsets", lambda settings: {0: 500, 1: 0})
    pointer = object() if served else None
    monkeypatch.setattr(registry, "version_store", lambda settings: SimpleNamespace(pointer=lambda: pointer))
    settings = Settings()
    found = kafka_gaps.gaps(settings, jobs.ARCHIVER)
    master, dlq = kafka_gaps.checkpoint_dirs(settings, jobs.ARCHIVER)
    assert found == ([Gap(master, 0, 0, 500), Gap(dlq, 0, 0, 500)] if served else [])
    assert kafka_gaps.gaps(settings, jobs.SPEED_LAYER) == [], "the speed layer's fresh start checks the batch cutoffs"
    # Kafka deleted nothing: the pointer (in HBase, which the archiver does not wait for) is not read.
    monkeypatch.setattr(kafka, "first_offsets", lambda settings: {0: 0, 1: 0})
    monkeypatch.setattr(registry, "version_store", lambda settings: pytest.fail("HBase asked"))
    assert kafka_gaps.gaps(settings, jobs.ARCHIVER) == []
