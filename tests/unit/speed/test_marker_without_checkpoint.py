"""A checkpoint whose marker is gone is not a first start (no services: the checkpoint's reads are
given). Taken for one, every view was "maintained since time 0", so a view added last week was
served exact from any cutoff, and the bucket-size check was skipped."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from definitions.settings import Settings
from definitions.views import PAGE_VIEWS, Registry
from speed_layer.job import check_checkpoint_settings
from stores import checkpoints, registry


@pytest.fixture
def stores(monkeypatch):
    written: list[tuple] = []
    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: None)
    monkeypatch.setattr(checkpoints, "write_marker", lambda *args: written.append(args))
    monkeypatch.setattr(registry, "version_store", lambda _settings: SimpleNamespace(pointer=lambda: None))
    return written


def test_a_checkpoint_with_commits_and_no_marker_is_refused(stores, monkeypatch):
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: {0: 1_234})
    with pytest.raises(SystemExit, match="committed micro-batches but no marker"):
        check_checkpoint_settings(Settings(), Registry((PAGE_VIEWS,)))
    assert not stores, "no marker was written"


def test_a_first_start_writes_its_marker(stores, monkeypatch):
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: None)
    assert check_checkpoint_settings(Settings(), Registry((PAGE_VIEWS,))).names() == ["page_views"]
    assert len(stores) == 1
