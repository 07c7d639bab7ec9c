"""The speed layer's state-store options (speed_layer.job.STATE_STORE_OPTIONS) reach the state store
(local Spark stream, no service): RocksDB does not count the rows it holds, which saves a read per
write, and the de-duplication keeps and forgets exactly as it does when they are counted."""

from __future__ import annotations

import pytest

from speed_layer.job import STATE_ROWS_COUNTED, STATE_STORE_OPTIONS
from stores.checkpoints import DEDUPE_SCAN
from tests.unit.speed.test_tick_watermark import WINDOW_S, event, held, run, tick

STEPS = [
    [event("a", 100), event("b", 100), event("a", 101)],
    [event("a", 105), event("c", 110)],  # a copy of an id held, and a new one
    [tick(110 + 3 * WINDOW_S + 1)],  # past every id's window: all are forgotten
    [tick(110 + 3 * WINDOW_S + 2)],
]
EMITTED = [["a", "b"], ["c"], [], []]


def mkdir(path):
    path.mkdir()
    return path


@pytest.fixture
def options(spark):
    """Set `options(conf)` on the local session for the test, each as it was afterwards."""
    before: dict[str, str | None] = {}

    def apply(conf: dict[str, str]):
        for key, value in conf.items():
            before.setdefault(key, spark.conf.get(key, None))
            spark.conf.set(key, value)
        return spark

    yield apply
    for key, value in before.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def test_the_speed_layers_state_store_counts_no_rows_and_keeps_the_same_first_copies(options, tmp_path):
    dedupe = DEDUPE_SCAN  # the default operator (the timers' state store is the same RocksDB)
    assert STATE_ROWS_COUNTED is False
    counted = options({**STATE_STORE_OPTIONS, "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "true"})
    emitted, progress = run(counted, mkdir(tmp_path / "counted"), dedupe, STEPS)
    assert emitted == EMITTED
    assert [held(p) for p in progress] == [2, 3, 0, 0]

    uncounted = options(STATE_STORE_OPTIONS)
    emitted, progress = run(uncounted, mkdir(tmp_path / "uncounted"), dedupe, STEPS)
    assert emitted == EMITTED
    assert [held(p) for p in progress] == [0, 0, 0, 0], "the state store counted its rows"
