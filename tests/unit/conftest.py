"""Fixtures the unit tests of several packages share."""

from __future__ import annotations

import pytest


@pytest.fixture
def jars(tmp_path):
    """A jars directory holding an empty jar per group a Spark session takes (the Kafka connector, the
    event contract's validator, the speed layer's de-duplication): enough for session options, no Spark started."""
    from definitions.spark import CONTRACT_GROUP, KAFKA_CONNECTOR_GROUP, SPEED_LAYER_GROUP

    for group in (KAFKA_CONNECTOR_GROUP, CONTRACT_GROUP, SPEED_LAYER_GROUP):
        (tmp_path / "jars" / group).mkdir(parents=True)
        (tmp_path / "jars" / group / f"{group}.jar").write_bytes(b"")
    return tmp_path / "jars"
