"""The speed layer's de-duplication: of the copies of an event id ingested within
`speed.dedupe_window_s`, only the first counts.

A new checkpoint keeps that state with the operator `speed.dedupe_operator` names: Spark's
dropDuplicatesWithinWatermark (DEDUPE_SCAN, the default), which reads its whole state at every
micro-batch to find what to forget (~0.7 µs of CPU per id held, bench/dedupe_state_cost.py), or
event-time timers (speed_layer/jvm/FirstCopyWithinWindow.java, stores.checkpoints.DEDUPE_TIMERS),
whose micro-batch reads only the ids that expire. A checkpoint goes on with the operator that made
it: the other cannot read its state; `lambdactl reset-speed` makes a new one with the setting's.
Each id costs the timers an insert and an expiry, and a watermark jump over millions of ids stalls
them for minutes: on the whole platform the scan held more at 120 s and 600 s windows (README)."""

from __future__ import annotations

from datetime import UTC, datetime

from definitions.settings import Settings
from stores.checkpoints import DEDUPE_SCAN, DEDUPE_TIMERS
from stores.kafka_source import kept_tick

# speed_layer/jvm, compiled by infra/compile_jvm.sh into the jars every platform session carries.
FIRST_COPY_CLASS = "lambdaplatform.speed.FirstCopyWithinWindow"
# Which copy of an id is first: the batch layer's order (stores.master.first_copies).
ORDER = ("ingest_time", "kafka_partition", "kafka_offset")
# Bounds no ingest time reaches: the filter of valid events compares ingest_time with one of them.
EARLIEST = datetime(1000, 1, 1, tzinfo=UTC)
NEVER = datetime(9000, 1, 1, tzinfo=UTC)


def first_copies_within_window(events, settings: Settings, dedupe: str, keep: list[str] | None = None):
    """The first copy of each valid event id among the streaming frame `events` (validated records:
    `reason` null for a valid event, which has an `event_id`; `ingest_time`, `kafka_partition` and
    `kafka_offset` from Kafka), a watermark of the window on `ingest_time`; rows older than the
    watermark are dropped as late (Spark counts them in the operator's numRowsDroppedByWatermark).

    Invalid records and ticks (TICK_REASON) are not de-duplicated, counted or dropped as late, and
    an invalid record does not move the watermark; a tick moves it as an event ingested one window
    before it would. So when no event arrives, an id is forgotten three windows after the last
    event (and an aggregate two windows after its ingest bucket's end) instead of being read at
    every micro-batch; and a partition with ticks only, read ahead of one with events while a
    backlog is caught up, leaves that one a window more before its events are late.

    `dedupe` names the operator, with no default: the one a checkpoint's state is made by (dedupe_of
    its marker) is the only one Spark accepts. Only the columns `keep` (all when None) and those go
    through the operator's shuffle: the raw record need not. Copies in one micro-batch: the timers
    keep the first by ingest time, Kafka partition and offset, as the batch layer does."""
    from pyspark.sql import functions as F

    if dedupe not in (DEDUPE_TIMERS, DEDUPE_SCAN):
        raise ValueError(f"unknown de-duplication operator {dedupe!r}: {DEDUPE_TIMERS!r} or {DEDUPE_SCAN!r}")
    columns = None if keep is None else list(dict.fromkeys(["event_id", *ORDER, *keep]))
    if columns is not None:
        events = events.select(*dict.fromkeys(["reason", *columns]))
    window_s = settings.speed.dedupe_window_s
    tick = kept_tick()
    # An invalid record's time is whatever it was stamped with (a producer's, for one): it must not
    # move the watermark. Only valid events and ticks go on.
    events = events.where(F.col("reason").isNull() | tick)
    vouched = F.timestamp_millis(F.unix_millis(F.col("ingest_time")) - window_s * 1000)
    watermarked = events.withColumn("ingest_time", F.when(tick, vouched).otherwise(F.col("ingest_time"))).withWatermark(
        "ingest_time", f"{window_s} seconds"
    )
    # Valid events only, by a condition that names ingest_time: Spark's optimizer moves a filter on
    # other columns alone below the watermark, where ticks would no longer move it.
    counted = F.col("ingest_time") >= F.when(F.col("reason").isNull(), F.lit(EARLIEST)).otherwise(F.lit(NEVER))
    valid = watermarked.where(counted)
    if columns is not None:
        valid = valid.select(*columns)
    if dedupe == DEDUPE_SCAN:
        return valid.dropDuplicatesWithinWatermark(["event_id"])
    from pyspark.sql import DataFrame

    spark = valid.sparkSession
    operator = spark._jvm
    for part in FIRST_COPY_CLASS.split("."):
        operator = getattr(operator, part)
    order = spark._sc._gateway.new_array(spark._jvm.java.lang.String, len(ORDER) - 1)
    for i, column in enumerate(ORDER[1:]):
        order[i] = column
    return DataFrame(operator.firstCopies(valid._jdf, "event_id", ORDER[0], window_s * 1000, order), spark)


def dedupe_of(marker) -> str:
    """The operator a checkpoint's marker says its de-duplication state was made by."""
    return marker.dedupe if marker is not None and marker.dedupe is not None else DEDUPE_SCAN
