"""The speed layer's de-duplication on a real (local) Spark stream: the event-time-timer operator a
new checkpoint runs (speed_layer/jvm/FirstCopyWithinWindow.java) keeps the same copies as Spark's
dropDuplicatesWithinWatermark, which a checkpoint made before goes on running, drops the same late
rows (counted as such, which the late-drops record reads), and forgets ids when the watermark passes
their window instead of reading its whole state at every micro-batch."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from definitions.layer_settings import SpeedSettings
from definitions.settings import Settings
from speed_layer.first_copies import first_copies_within_window
from stores.checkpoints import DEDUPE_SCAN, DEDUPE_TIMERS
from stores.progress import dropped_by_watermark

BASE_S = 1_700_000_000
WINDOW_S = 60
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

# One micro-batch each: (event id, ingest time in s after BASE_S, copy tag). The watermark after a
# batch is its latest ingest time less the window.
STEPS = [
    # a twice at one time; e twice, the later copy first: one of each counts
    [("a", 90, 1), ("a", 90, 2), ("b", 100, 1), ("e", 95, 1), ("e", 92, 2)],
    # a again within its window: dropped; the watermark moves to 140
    [("a", 120, 3), ("c", 200, 1)],
    # the watermark moves to 240: a, b and e (kept until 150, 160, 152) are forgotten, c (260) is not
    [("d", 300, 1)],
    # a after its window counts again; b and c older than the watermark are late; c within its window
    [("a", 250, 4), ("b", 100, 2), ("c", 230, 2), ("c", 245, 3)],
]


def run_steps(spark, tmp_path, dedupe: str) -> tuple[list[list[tuple]], list[list]]:
    """The rows each step's micro-batches emitted, as (event id, ingest s, tag), and their progress."""
    settings = Settings(speed=SpeedSettings(dedupe_window_s=WINDOW_S))
    source, checkpoint = tmp_path / f"in-{dedupe}", tmp_path / f"ck-{dedupe}"
    source.mkdir()
    emitted, progress = [], []
    for number, step in enumerate(STEPS):
        lines = [
            json.dumps({"event_id": i, "ingest_time": datetime.fromtimestamp(BASE_S + s, UTC).isoformat(), "tag": t})
            for i, s, t in step
        ]
        (source / f"{number:02d}.json").write_text("\n".join(lines) + "\n")
        events = spark.readStream.schema("event_id string, ingest_time timestamp, tag int").json(source.as_uri())
        rows: list = []
        query = (
            first_copies_within_window(events, settings, dedupe)
            .writeStream.foreachBatch(lambda batch, _id, rows=rows: rows.extend(batch.collect()))
            .outputMode("append")
            .option("checkpointLocation", checkpoint.as_uri())
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()
        emitted.append(sorted((r.event_id, int(r.ingest_time.timestamp()) - BASE_S, r.tag) for r in rows))
        progress.append(list(query.recentProgress))
    return emitted, progress


@pytest.fixture
def rocksdb(spark):
    before = spark.conf.get("spark.sql.streaming.stateStore.providerClass")
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    yield spark
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", before)


def held_rows(progress: list) -> int:
    """The state rows the last micro-batch of a step left (the de-duplication's only operator)."""
    return int(progress[-1].stateOperators[0].numRowsTotal)


def test_timers_keep_the_copies_the_watermark_scan_keeps(rocksdb, tmp_path):
    timers, timers_progress = run_steps(rocksdb, tmp_path, DEDUPE_TIMERS)
    scan, scan_progress = run_steps(rocksdb, tmp_path, DEDUPE_SCAN)

    def without_tags(steps):
        return [[(i, s) for i, s, _ in step if i != "e"] + [(i,) for i, _, _ in step if i == "e"] for step in steps]

    assert without_tags(timers) == without_tags(scan)
    assert [[(i, s) for i, s, _ in step] for step in timers] == [
        [("a", 90), ("b", 100), ("e", 92)],  # of copies in one micro-batch, the first ingested
        [("c", 200)],
        [("d", 300)],
        [("a", 250)],
    ]
    # b@100 and c@230 were late: both operators count them as dropped by the watermark
    late = [[dropped_by_watermark(p) for p in step] for step in (timers_progress[3], scan_progress[3])]
    assert sum(late[0]) == sum(late[1]) == 2


def test_timers_forget_ids_whose_window_the_watermark_passed(rocksdb, tmp_path):
    _, progress = run_steps(rocksdb, tmp_path, DEDUPE_TIMERS)
    # after step 1: a, b, e held; step 2: + c; step 3: a, b, e forgotten, d held; step 4: a again
    assert [held_rows(step) for step in progress] == [3, 4, 2, 3]
