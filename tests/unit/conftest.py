"""Fixtures the unit tests of several packages share."""

from __future__ import annotations

import pytest


@pytest.fixture
def jars(tmp_path):
    """A jars directory holding an empty jar per group a Spark session takes (the Kafka connector and
    the event contract's validator): enough for session options, no Spark started."""
    for group in ("spark-kafka", "contract"):
        (tmp_path / "jars" / group).mkdir(parents=True)
        (tmp_path / "jars" / group / f"{group}.jar").write_bytes(b"")
    return tmp_path / "jars"
