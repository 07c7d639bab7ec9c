"""A streaming job's progress is published for readers elsewhere: at start and end at once, and
between at most every `stack.progress_publish_s`; the file beside the driver every batch."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from definitions.settings import Settings
from stores.progress import ProgressFile, published_max_age_s


def batch(n: int) -> SimpleNamespace:
    return SimpleNamespace(
        name="speed-views",
        batchId=n,
        timestamp="2026-11-24T00:00:00.000Z",
        numInputRows=1,
        inputRowsPerSecond=1.0,
        processedRowsPerSecond=1.0,
        durationMs={"triggerExecution": 10},
        sources=[],
        stateOperators=[],
        observedMetrics={},
    )


def test_start_and_end_are_published_at_once_batches_at_most_every_interval(tmp_path):
    published: list[dict] = []
    settings = Settings(state_dir=tmp_path)
    settings = settings.model_copy(update={"stack": settings.stack.model_copy(update={"progress_publish_s": 3600})})
    progress = ProgressFile(settings, "speed-layer", publish=lambda text: published.append(json.loads(text)))
    progress.started("q1", "speed-views")
    for n in range(5):
        progress.progress(batch(n))
    progress.terminated("q1", "boom")
    assert [doc["queries"]["speed-views"].get("batch_id") for doc in published] == [None, 4]
    assert published[0]["queries"]["speed-views"]["active"] is True
    assert (
        published[-1]["queries"]["speed-views"]["active"] is False
        and published[-1]["queries"]["speed-views"]["error"] == "boom"
    )
    assert {"host", "pid", "updated_ms"} <= published[-1].keys()
    # the file beside the driver has every batch
    assert json.loads(progress.path.read_text())["queries"]["speed-views"]["batch_id"] == 4


def test_batches_are_published_once_the_interval_has_passed(tmp_path, monkeypatch):
    published: list[str] = []
    clock = [1000.0]
    monkeypatch.setattr("stores.progress.time.monotonic", lambda: clock[0])
    progress = ProgressFile(Settings(state_dir=tmp_path), "speed-layer", publish=published.append)
    progress.started("q1", "speed-views")
    progress.progress(batch(1))  # within the interval of the start: kept locally only
    clock[0] += progress.publish_every_s
    progress.progress(batch(2))
    assert [json.loads(t)["queries"]["speed-views"].get("batch_id") for t in published] == [None, 2]


def test_the_end_of_a_run_delivered_after_the_next_run_began_leaves_the_query_running(tmp_path):
    """A job starts its queries again (strict once past an accepted Kafka loss): Spark hands the new
    run's start to the listener at once and the old run's end through its queue, later. Read as the
    query's end, health said "query not running" until the next batch."""
    progress = ProgressFile(Settings(state_dir=tmp_path), "archiver")
    progress.started("q1", "archiver-master", "run-1")
    progress.started("q1", "archiver-master", "run-2")
    progress.terminated("q1", None, "run-1")
    assert json.loads(progress.path.read_text())["queries"]["archiver-master"]["active"] is True
    progress.terminated("q1", "boom", "run-2")
    assert json.loads(progress.path.read_text())["queries"]["archiver-master"]["active"] is False


def test_a_failing_hook_leaves_the_batch_counted_and_says_why(tmp_path):
    """The archiver publishes its completeness from a hook: a store outage there lost the batch's
    summary and totals (Spark's listener swallowed the error), and the job looked stuck."""

    def hook(progress):
        raise ConnectionError("WebHDFS refused")

    observed = batch(3)
    observed.observedMetrics = {"archived": SimpleNamespace(asDict=lambda: {"events": 5})}
    progress = ProgressFile(Settings(state_dir=tmp_path), "archiver", hooks={"speed-views": hook})
    progress.progress(observed)
    state = json.loads(progress.path.read_text())
    assert state["queries"]["speed-views"]["batch_id"] == 3
    assert state["totals"]["events"] == 5
    assert "WebHDFS refused" in state["queries"]["speed-views"]["hook_error"]


def test_an_idle_job_publishes_what_changed_and_otherwise_only_to_stay_fresh(tmp_path, monkeypatch):
    """Spark reports an idle query every few seconds; each report published the unchanged document
    again (a file written on HDFS every 5 s by each job, most of their idle work). Now an idle report
    publishes a batch not published yet, and otherwise only often enough that a reader elsewhere
    never finds the document older than it accepts."""
    published: list[dict] = []
    clock = [1000.0]
    monkeypatch.setattr("stores.progress.time.monotonic", lambda: clock[0])
    settings = Settings(state_dir=tmp_path)
    progress = ProgressFile(settings, "speed-layer", publish=lambda text: published.append(json.loads(text)))
    progress.started("q1", "speed-views")
    progress.progress(batch(1))  # within the interval of the start: kept back
    assert len(published) == 1
    clock[0] += progress.publish_every_s
    progress.idle()  # the batch kept back goes out with the next idle report
    assert published[-1]["queries"]["speed-views"]["batch_id"] == 1
    count = len(published)
    for _ in range(100):  # idle reports every publish interval: nothing new to say
        clock[0] += progress.publish_every_s / 2
        progress.idle()
    idle_s = 50 * progress.publish_every_s
    accepted_s = published_max_age_s(settings)
    assert len(published) - count <= idle_s / (accepted_s / 4) + 1, "published at every idle report"
    assert len(published) - count >= idle_s / (accepted_s / 2), "not published often enough to stay fresh"
    # however long it idles, no reader elsewhere finds the document older than it accepts
    assert progress.keepalive_s * 2 <= accepted_s
    # the local file still follows every report
    assert json.loads(progress.path.read_text())["updated_ms"] >= published[-1]["updated_ms"]


def test_a_publication_that_failed_goes_out_again_with_the_next_report(tmp_path, monkeypatch):
    """HDFS down at a publication: the change it carried is not taken as published."""
    attempts: list[dict] = []
    up = [False]
    clock = [1000.0]
    monkeypatch.setattr("stores.progress.time.monotonic", lambda: clock[0])

    def publish(text: str) -> bool:
        attempts.append(json.loads(text))
        return up[0]

    progress = ProgressFile(Settings(state_dir=tmp_path), "speed-layer", publish=publish)
    progress.started("q1", "speed-views")
    clock[0] += progress.publish_every_s
    progress.progress(batch(7))  # HDFS down: not kept
    up[0] = True
    clock[0] += progress.publish_every_s
    progress.idle()
    assert len(attempts) == 3 and attempts[-1]["queries"]["speed-views"]["batch_id"] == 7


def test_a_reader_set_to_accept_less_than_an_idle_job_republishes_still_counts_it(tmp_path, monkeypatch):
    """A job republishes an idle document every keepalive_s of its own settings; a reader elsewhere
    with a shorter stack.stuck_after_s called the idle job gone between two publications."""
    from stores import webhdfs
    from stores.progress import read_progress

    job = ProgressFile(Settings(state_dir=tmp_path), "speed-layer")
    doc = {**job.state, "host": "another-machine", "updated_ms": 1_000_000}

    class Hdfs:
        def __init__(self, *_args, **_kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *_exc):
            return None

        def read(self, _path):
            return json.dumps(doc).encode()

    monkeypatch.setattr(webhdfs, "WebHdfs", Hdfs)
    strict = Settings(state_dir=tmp_path, ingest_bucket_s=30, stack={"stuck_after_s": 30})
    idle_for_ms = int(job.keepalive_s * 1000) + 10_000  # just past one republication interval
    assert idle_for_ms / 1000 > published_max_age_s(strict)
    assert read_progress(strict, "speed-layer", now_ms=1_000_000 + idle_for_ms)["host"] == "another-machine"
    with pytest.raises(RuntimeError, match="not reporting"):
        read_progress(strict, "speed-layer", now_ms=1_000_000 + 3 * idle_for_ms)
