"""A streaming job that runs but finishes no micro-batch is reported stuck, with how long and how
far behind Kafka (no services: the progress document is what the job's listener writes)."""

from __future__ import annotations

import pytest

from stores.progress import Stuck, require_progressing

NOW_MS = 1_800_000_000_000


def state(**query) -> dict:
    return {"pid": 1, "started_ms": NOW_MS - 3_600_000, "queries": {"q": {"active": True, **query}}}


def test_a_query_that_reported_recently_is_progressing():
    require_progressing(state(batch_id=7, reported_ms=NOW_MS - 299_000, rows_behind=5), ("q",), 300, NOW_MS)


def test_a_silent_query_is_stuck_naming_how_long_and_the_backlog():
    with pytest.raises(Stuck) as stuck:
        require_progressing(state(batch_id=7, reported_ms=NOW_MS - 301_000, rows_behind=12_345), ("q",), 300, NOW_MS)
    assert str(stuck.value) == (
        "stuck: query q has finished no micro-batch for 301 s (more than "
        "stack.stuck_after_s=300); its last one (batch 7) was 12,345 records behind Kafka"
    )


def test_a_query_that_never_finished_a_batch_counts_from_the_jobs_start():
    young = {"pid": 1, "started_ms": NOW_MS - 10_000, "queries": {"q": {"active": True}}}
    require_progressing(young, ("q",), 300, NOW_MS)
    with pytest.raises(Stuck, match="none has finished since it started"):
        require_progressing(state(), ("q",), 300, NOW_MS)


def test_a_stopped_query_is_not_running_rather_than_stuck():
    stopped = {"pid": 1, "started_ms": NOW_MS, "queries": {"q": {"active": False, "error": "boom"}}}
    with pytest.raises(RuntimeError, match="query q is not running: boom") as raised:
        require_progressing(stopped, ("q",), 300, NOW_MS)
    assert not isinstance(raised.value, Stuck)


def test_the_archivers_health_names_a_completeness_that_was_not_published(monkeypatch):
    """A failing completeness hook (stores.progress) leaves the batch counted: the health line says
    the marker is missing and the kind of failure, rather than showing only an ever older
    completeness. Not the failure's text: the API's /health answers without a token, and the text
    may name the stores' addresses (the archiver's log has it)."""
    import time

    from definitions.jobs import ARCHIVER_DLQ_QUERY, ARCHIVER_MASTER_QUERY
    from definitions.settings import Settings
    from stores import health, progress

    now_ms = int(time.time() * 1000)
    queries = {
        ARCHIVER_MASTER_QUERY: {
            "active": True,
            "batch_id": 3,
            "reported_ms": now_ms,
            "hook_error": "ConnectionError: HTTPConnectionPool(host='10.9.8.7', port=9870): refused",
        },
        ARCHIVER_DLQ_QUERY: {"active": True, "batch_id": 3, "reported_ms": now_ms},
    }
    doc = {"pid": 1, "started_ms": now_ms, "queries": queries, "completeness": {"complete_before_ms": now_ms}}
    monkeypatch.setattr(progress, "read_progress", lambda settings, job: doc)
    detail = health.archiver(Settings())
    assert "completeness was not published (ConnectionError" in detail, detail
    assert "10.9.8.7" not in detail and "9870" not in detail, detail
