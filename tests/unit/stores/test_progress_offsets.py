"""Kafka source offsets as Spark reports them are parsed in one place (no services)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from stores.progress import rows_behind, source_offsets


def test_offsets_are_parsed_to_integers_per_topic_and_partition():
    assert source_offsets('{"events": {"0": 12, "1": "7"}}') == {"events": {0: 12, 1: 7}}
    assert source_offsets(None) == {}


@pytest.mark.parametrize("text", ['["events"]', '{"events": 3}', '{"events": {"x": 1}}', "{"])
def test_anything_else_is_refused(text):
    with pytest.raises(ValueError):
        source_offsets(text)


def test_rows_behind_is_latest_minus_end_over_every_partition():
    source = SimpleNamespace(endOffset='{"events": {"0": 10, "1": 5}}', latestOffset='{"events": {"0": 15, "1": 5}}')
    assert rows_behind(SimpleNamespace(sources=[source])) == 5
    broken = SimpleNamespace(endOffset="not json", latestOffset="{}")
    assert rows_behind(SimpleNamespace(sources=[broken])) is None


def operator(name: str, rows: int, updated: int, removed: int, times_ms: tuple, memory: int = 0) -> SimpleNamespace:
    """A stateful operator's progress as Spark reports it; `times_ms`: updates, removals, commit."""
    updates, removals, commit = times_ms
    return SimpleNamespace(
        operatorName=name,
        numRowsTotal=rows,
        numRowsUpdated=updated,
        numRowsRemoved=removed,
        allUpdatesTimeMs=updates,
        allRemovalsTimeMs=removals,
        commitTimeMs=commit,
        memoryUsedBytes=memory,
    )


def test_a_batch_progress_keeps_where_its_time_went(tmp_path):
    import json

    from definitions.settings import Settings
    from stores.progress import ProgressFile

    settings = Settings(state_dir=tmp_path)
    progress_file = ProgressFile(settings, "speed-layer")
    source = SimpleNamespace(endOffset='{"events": {"0": 10}}', latestOffset='{"events": {"0": 10}}')
    operators = [
        operator("transformWithStateExec", rows=5, updated=4, removed=1, times_ms=(7, 3, 11)),
        operator("stateStoreSave", rows=2, updated=2, removed=0, times_ms=(1, 0, 4)),
    ]
    breakdown = {"triggerExecution": 900, "addBatch": 600, "latestOffset": 40, "walCommit": 80}
    progress_file.progress(
        SimpleNamespace(
            name="speed-views",
            batchId=3,
            timestamp="2026-11-24T00:00:00.000Z",
            numInputRows=10,
            inputRowsPerSecond=1.0,
            processedRowsPerSecond=2.0,
            durationMs=breakdown,
            sources=[source],
            stateOperators=operators,
            observedMetrics={},
        )
    )

    query = json.loads(progress_file.path.read_text())["queries"]["speed-views"]
    assert query["batch_ms"] == 900 and query["duration_ms"] == breakdown
    assert query["state_ms"] == {"updates": 8, "removals": 3, "commit": 15}
    assert query["state_by_operator"] == [  # in the plan's order: which operator the state time is
        {
            "operator": "transformWithStateExec",
            "rows": 5,
            "updated": 4,
            "removed": 1,
            "updates_ms": 7,
            "removals_ms": 3,
            "commit_ms": 11,
        },
        {
            "operator": "stateStoreSave",
            "rows": 2,
            "updated": 2,
            "removed": 0,
            "updates_ms": 1,
            "removals_ms": 0,
            "commit_ms": 4,
        },
    ]
    assert query["state_rows"] == 7 and query["rows_behind"] == 0


def test_a_state_store_that_counts_no_rows_reports_them_unknown_and_its_memory_instead(tmp_path):
    """The speed layer's RocksDB does not count its rows (speed_layer.job.STATE_ROWS_COUNTED) and
    reports 0: its progress says the rows are unknown, never that no state is held, and shows the
    state's memory; the status line says the same."""
    import json

    from definitions.settings import Settings
    from stores.health import state_held
    from stores.progress import ProgressFile

    dedupe = operator("dedupeWithinWatermark", rows=0, updated=40, removed=3, times_ms=(7, 3, 11), memory=3 * 2**20)
    batch = SimpleNamespace(
        name="speed-views",
        batchId=3,
        timestamp="2026-11-24T00:00:00.000Z",
        numInputRows=40,
        inputRowsPerSecond=1.0,
        processedRowsPerSecond=2.0,
        durationMs={"triggerExecution": 900},
        sources=[SimpleNamespace(endOffset='{"events": {"0": 10}}', latestOffset='{"events": {"0": 10}}')],
        stateOperators=[dedupe, SimpleNamespace(**{**vars(dedupe), "memoryUsedBytes": 2**20})],
        observedMetrics={},
    )
    uncounted = ProgressFile(Settings(state_dir=tmp_path / "a"), "speed-layer", state_rows_counted=False)
    uncounted.progress(batch)
    query = json.loads(uncounted.path.read_text())["queries"]["speed-views"]
    assert query["state_rows"] is None and query["state_bytes"] == 4 * 2**20
    assert [op["rows"] for op in query["state_by_operator"]] == [None, None]
    assert [op["updated"] for op in query["state_by_operator"]] == [40, 40]
    assert state_held(query) == "state 4 MiB in memory"

    counted = ProgressFile(Settings(state_dir=tmp_path / "b"), "speed-layer")
    counted.progress(batch)
    query = json.loads(counted.path.read_text())["queries"]["speed-views"]
    assert query["state_rows"] == 0 and state_held(query) == "0 state rows, state 4 MiB in memory"
    assert state_held({"state_rows": 12}) == "12 state rows"  # a progress from before state_bytes
