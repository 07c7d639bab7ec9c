"""Cassandra's commit log durability comes from settings: `batch` (acknowledged = on disk) by default."""

from __future__ import annotations

import pytest

from definitions.settings import CassandraSettings, Settings
from infra.java import JavaRuntime
from infra.services import CASSANDRA


@pytest.mark.parametrize(
    "mode, lines",
    [
        ("batch", ["commitlog_sync: batch"]),
        ("group", ["commitlog_sync: group", "commitlog_sync_group_window: 15ms"]),
        ("periodic", ["commitlog_sync: periodic", "commitlog_sync_period: 10000ms"]),
    ],
)
def test_commitlog_mode_is_rendered(tmp_path, mode, lines):
    settings = Settings(state_dir=tmp_path, cassandra=CassandraSettings(commitlog_sync=mode))
    dirs = CASSANDRA.dirs(settings)
    CASSANDRA.render(settings, dirs, JavaRuntime.__new__(JavaRuntime))
    yaml = (dirs.conf / "cassandra.yaml").read_text().splitlines()
    assert [line for line in yaml if line.startswith("commitlog_sync")] == lines


def test_batch_is_the_default():
    assert Settings().cassandra.commitlog_sync == "batch"
