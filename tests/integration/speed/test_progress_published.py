"""The streaming jobs' health comes from their progress published on HDFS, not from files beside
their drivers."""

from __future__ import annotations

import json

import pytest

from definitions.jobs import ARCHIVER, SPEED_LAYER
from stores import health
from stores.progress import published_path, read_progress
from stores.webhdfs import WebHdfs


@pytest.mark.parametrize("job", [SPEED_LAYER, ARCHIVER])
def test_progress_is_read_from_hdfs_without_the_drivers_file(settings, stack, job, tmp_path, monkeypatch):
    monkeypatch.setattr("stores.progress.progress_path", lambda s, j: tmp_path / "nowhere" / f"{j}.json")
    state = read_progress(settings, job)
    assert any(q.get("active") for q in state["queries"].values())
    with WebHdfs(settings) as hdfs:
        raw = hdfs.read(published_path(settings, job))
    assert raw is not None and json.loads(raw)["pid"] == state["pid"]
    probe = health.speed_layer if job == SPEED_LAYER else health.archiver
    assert probe(settings)


def test_progress_from_another_machine_counts_only_while_recent(settings, stack):
    state = read_progress(settings, SPEED_LAYER)
    elsewhere = {**state, "host": "another-machine", "pid": 1}
    with WebHdfs(settings) as hdfs:
        path = published_path(settings, "test-remote-job")
        hdfs.write(path, json.dumps(elsewhere).encode())
        try:
            assert (
                read_progress(settings, "test-remote-job", now_ms=state["updated_ms"] + 5_000)["host"]
                == "another-machine"
            )
            with pytest.raises(RuntimeError, match="not reporting"):
                read_progress(settings, "test-remote-job", now_ms=state["updated_ms"] + 3_600_000)
        finally:
            hdfs.delete(path)
