"""Fixtures of the speed layer's integration tests."""

from __future__ import annotations

import pytest

from stores.webhdfs import WebHdfs


@pytest.fixture
def scratch(settings, unique):
    """The settings with a speed-layer checkpoint of the test's own on the real HDFS (so its marker,
    late-drops record and replay marks beside it are the test's own too), removed afterwards."""
    speed = settings.speed.model_copy(update={"checkpoint_dir": f"/lambda/test/speed-{unique}/checkpoint"})
    yield settings.model_copy(update={"speed": speed})
    with WebHdfs(settings) as fs:
        fs.delete(f"/lambda/test/speed-{unique}", recursive=True)
