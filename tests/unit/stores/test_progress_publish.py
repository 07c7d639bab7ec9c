"""A streaming job's progress is published for readers elsewhere: at start and end at once, and
between at most every `stack.progress_publish_s`; the file beside the driver every batch."""

from __future__ import annotations

import json
from types import SimpleNamespace

from definitions.settings import Settings
from stores.progress import ProgressFile


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
