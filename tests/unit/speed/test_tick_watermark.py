"""The archiver's ticks move the speed layer's watermark (local Spark stream, no service): once no
event arrives, the de-duplication forgets what it held instead of reading it at every micro-batch
for ever, yet a tick is never counted, never de-duplicated and never dropped as late."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from definitions.layer_settings import SpeedSettings
from definitions.settings import Settings
from stores.checkpoints import DEDUPE_SCAN, DEDUPE_TIMERS
from stores.kafka_source import PRODUCER_STAMP_REASON, TICK_REASON
from stores.progress import dropped_by_watermark
from tests.support.first_copies_stream import stream_steps

BASE_S = 1_700_000_000
WINDOW_S = 60
SCHEMA = "reason string, event_id string, ingest_time timestamp, kafka_partition int, kafka_offset long"


def tick(at_s: int) -> tuple:
    return (TICK_REASON, None, at_s)


def event(event_id: str, at_s: int) -> tuple:
    return (None, event_id, at_s)


def run(spark, tmp_path, dedupe: str, steps: list[list[tuple]]) -> tuple[list[list[str]], list[list]]:
    """The event ids each step's micro-batches emitted, and their progress."""
    settings = Settings(speed=SpeedSettings(dedupe_window_s=WINDOW_S))
    records, offset = [], 0
    for step in steps:
        records.append([])
        for reason, event_id, at_s in step:
            offset += 1
            stamp = datetime.fromtimestamp(BASE_S + at_s, UTC).isoformat()
            records[-1].append(
                {
                    "reason": reason,
                    "event_id": event_id,
                    "ingest_time": stamp,
                    "kafka_partition": 0,
                    "kafka_offset": offset,
                }
            )
    emitted, progress = stream_steps(spark, tmp_path, SCHEMA, records, settings, dedupe)
    return [sorted(r.event_id for r in rows) for rows in emitted], progress


def held(step_progress: list) -> int:
    return int(step_progress[-1].stateOperators[0].numRowsTotal)


@pytest.mark.parametrize("dedupe", [DEDUPE_SCAN, DEDUPE_TIMERS])
def test_ticks_alone_let_the_deduplication_forget_what_it_held(rocksdb, tmp_path, dedupe):
    """Events, then only ticks: a tick vouches for one window before its own ingest time, so ticks
    three windows after the events let the state empty; ticks two windows after do not yet."""
    steps = [
        [event("a", 100), event("b", 100), event("a", 101)],
        [tick(100 + 2 * WINDOW_S), tick(100 + 2 * WINDOW_S + 5)],
        [tick(100 + 3 * WINDOW_S + 1)],
        [tick(100 + 3 * WINDOW_S + 2)],
    ]
    emitted, progress = run(rocksdb, tmp_path, dedupe, steps)
    assert emitted == [["a", "b"], [], [], []]  # no tick is ever emitted
    assert held(progress[0]) == 2
    assert held(progress[1]) == 2  # within a window of the ticks' vouched time: kept
    assert held(progress[3]) == 0, [held(p) for p in progress]
    assert sum(dropped_by_watermark(p) for step in progress for p in step) == 0


@pytest.mark.parametrize("dedupe", [DEDUPE_SCAN, DEDUPE_TIMERS])
def test_a_tick_behind_the_watermark_is_not_a_late_row_and_invalid_rows_are_not_counted(rocksdb, tmp_path, dedupe):
    """A partition's tick behind the others' events is no late event: nothing is counted as dropped
    (the late-drops record would flag answers incomplete). Invalid records are not emitted."""
    steps = [
        [event("a", 1_000), ("missing field: url", "x", 1_000)],
        [tick(10), event("c", 1_001), ("missing field: url", "y", 10)],
    ]
    emitted, progress = run(rocksdb, tmp_path, dedupe, steps)
    assert emitted == [["a"], ["c"]]
    assert sum(dropped_by_watermark(p) for step in progress for p in step) == 0


@pytest.mark.parametrize("dedupe", [DEDUPE_SCAN, DEDUPE_TIMERS])
def test_an_invalid_record_does_not_move_the_watermark(rocksdb, tmp_path, dedupe):
    """A record refused for its producer's stamp (or any reason) carries whatever time it was
    stamped with: a far-future one moved the watermark past every later event, which were then
    dropped as late. Only valid events and ticks move it."""
    steps = [
        [event("a", 100), (PRODUCER_STAMP_REASON, "future", 100 + 100 * WINDOW_S)],
        [event("b", 101), event("c", 102)],
    ]
    emitted, progress = run(rocksdb, tmp_path, dedupe, steps)
    assert emitted == [["a"], ["b", "c"]]
    assert sum(dropped_by_watermark(p) for step in progress for p in step) == 0


def test_ticks_are_neither_records_read_nor_invalid_ones_skipped(spark):
    """The speed layer's observed input counts (lambdactl status): ticks kept for the watermark
    count in neither."""
    from pyspark.sql import functions as F

    from speed_layer.job import input_counts

    rows = [(None, "a"), (None, "b"), ("missing field: url", "x"), (TICK_REASON, None), (TICK_REASON, None)]
    counts = spark.createDataFrame(rows, "reason string, event_id string").agg(*input_counts()).first()
    assert (counts.records, counts.invalid_skipped) == (3, 1)
    assert spark.createDataFrame([], "reason string").agg(*input_counts()).select(F.col("records")).first()[0] == 0
