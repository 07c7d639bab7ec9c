from __future__ import annotations

import pytest

from speed_layer.job import ROCKSDB_PROVIDER


@pytest.fixture
def rocksdb(spark):
    """The local session with the speed layer's state store (RocksDB), as before afterwards."""
    before = spark.conf.get("spark.sql.streaming.stateStore.providerClass")
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    yield spark
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", before)
