"""The speed layer's de-duplication on a real (local) Spark stream: the event-time-timer operator a
new checkpoint runs (speed_layer/jvm/FirstCopyWithinWindow.java) keeps the same copies as Spark's
dropDuplicatesWithinWatermark, which a checkpoint made before goes on running, drops the same late
rows (counted as such, which the late-drops record reads), and forgets ids when the watermark passes
their window instead of reading its whole state at every micro-batch."""

from __future__ import annotations

from datetime import UTC, datetime

from definitions.layer_settings import SpeedSettings
from definitions.settings import Settings
from stores.checkpoints import DEDUPE_SCAN, DEDUPE_TIMERS
from stores.progress import dropped_by_watermark
from tests.support.first_copies_stream import stream_steps

BASE_S = 1_700_000_000
WINDOW_S = 60

# One micro-batch each: (event id, ingest time in s after BASE_S, copy tag[, Kafka partition, offset]).
# The watermark after a batch is its latest ingest time less the window.
STEPS = [
    # a twice at one time; e twice, the later copy first; t and u twice in one millisecond, the later
    # by Kafka partition / offset first: one of each counts
    [
        ("a", 90, 1),
        ("a", 90, 2),
        ("b", 100, 1),
        ("e", 95, 1),
        ("e", 92, 2),
        ("t", 95, 1, 1, 5),
        ("t", 95, 2, 0, 9),
        ("u", 95, 1, 0, 7),
        ("u", 95, 2, 0, 3),
    ],
    # a again within its window: dropped; the watermark moves to 140
    [("a", 120, 3), ("c", 200, 1)],
    # the watermark moves to 240: a, b, e, t and u (kept until 150, 160, 152, 155) are forgotten, c (260) is not
    [("d", 300, 1)],
    # a after its window counts again; b and c older than the watermark are late; c within its window
    [("a", 250, 4), ("b", 100, 2), ("c", 230, 2), ("c", 245, 3)],
    # the watermark moves to 310, exactly where a is kept until: a is forgotten, as c (260)
    [("g", 370, 1)],
    # a just above the watermark: counted again
    [("a", 315, 5)],
]
# Copies of one id in one micro-batch that Spark's dropDuplicatesWithinWatermark keeps in no set order.
UNORDERED = {"e", "t", "u"}


def run_steps(spark, tmp_path, dedupe: str) -> tuple[list[list[tuple]], list[list]]:
    """The rows each step's micro-batches emitted, as (event id, ingest s, tag), and their progress."""
    settings = Settings(speed=SpeedSettings(dedupe_window_s=WINDOW_S))
    steps = [
        [
            {
                "event_id": i,
                "ingest_time": datetime.fromtimestamp(BASE_S + s, UTC).isoformat(),
                "tag": t,
                "kafka_partition": kafka[0] if kafka else 0,
                "kafka_offset": kafka[1] if kafka else number,
            }
            for i, s, t, *kafka in step
        ]
        for number, step in enumerate(STEPS)
    ]
    schema = "reason string, event_id string, ingest_time timestamp, tag int, kafka_partition int, kafka_offset long"
    emitted, progress = stream_steps(spark, tmp_path, schema, steps, settings, dedupe)
    return [
        sorted((r.event_id, int(r.ingest_time.timestamp()) - BASE_S, r.tag) for r in rows) for rows in emitted
    ], progress


def held_rows(progress: list) -> int:
    """The state rows the last micro-batch of a step left (the de-duplication's only operator)."""
    return int(progress[-1].stateOperators[0].numRowsTotal)


def test_timers_keep_the_copies_the_watermark_scan_keeps(rocksdb, tmp_path):
    timers, timers_progress = run_steps(rocksdb, tmp_path, DEDUPE_TIMERS)
    scan, scan_progress = run_steps(rocksdb, tmp_path, DEDUPE_SCAN)

    def comparable(steps):
        return [sorted((i, s if i not in UNORDERED else None) for i, s, _ in step) for step in steps]

    assert comparable(timers) == comparable(scan)
    assert timers == [
        # of copies in one micro-batch, the first by ingest time, then Kafka partition and offset
        [("a", 90, 1), ("b", 100, 1), ("e", 92, 2), ("t", 95, 2), ("u", 95, 2)],
        [("c", 200, 1)],
        [("d", 300, 1)],
        [("a", 250, 4)],
        [("g", 370, 1)],
        [("a", 315, 5)],
    ]
    # b@100 and c@230 were late: both operators count them as dropped by the watermark
    late = [[dropped_by_watermark(p) for p in step] for step in (timers_progress[3], scan_progress[3])]
    assert sum(late[0]) == sum(late[1]) == 2


def test_timers_forget_ids_whose_window_the_watermark_passed(rocksdb, tmp_path):
    _, progress = run_steps(rocksdb, tmp_path, DEDUPE_TIMERS)
    # step 1: a, b, e, t, u held; 2: + c; 3: all but c forgotten, + d; 4: + a; 5: a (at the boundary)
    # and c forgotten, + g; 6: + a
    assert [held_rows(step) for step in progress] == [5, 6, 2, 3, 2, 3]
