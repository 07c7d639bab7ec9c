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

from definitions.settings import Settings
from stores.checkpoints import DEDUPE_SCAN, DEDUPE_TIMERS

# speed_layer/jvm, compiled by infra/compile_jvm.sh into the jars every platform session carries.
FIRST_COPY_CLASS = "lambdaplatform.speed.FirstCopyWithinWindow"
# Which copy of an id is first: the batch layer's order (stores.master.first_copies).
ORDER = ("ingest_time", "kafka_partition", "kafka_offset")


def first_copies_within_window(valid, settings: Settings, dedupe: str, keep: list[str] | None = None):
    """The first copy of each event id among the streaming frame `valid` (validated events: every one
    has an `event_id`; `ingest_time`, `kafka_partition` and `kafka_offset` from Kafka), a watermark of
    the window on `ingest_time`; rows older than the watermark are dropped as late (Spark counts them
    in the operator's numRowsDroppedByWatermark). `dedupe` names the operator, with no default: the one
    a checkpoint's state is made by (dedupe_of its marker) is the only one Spark accepts. Only the
    columns `keep` (all when None) and those go through the operator's shuffle: the raw record need not. Copies in one micro-batch: the timers
    keep the first by ingest time, Kafka partition and offset, as the batch layer does."""
    if dedupe not in (DEDUPE_TIMERS, DEDUPE_SCAN):
        raise ValueError(f"unknown de-duplication operator {dedupe!r}: {DEDUPE_TIMERS!r} or {DEDUPE_SCAN!r}")
    if keep is not None:
        valid = valid.select(*dict.fromkeys(["event_id", *ORDER, *keep]))
    window_s = settings.speed.dedupe_window_s
    watermarked = valid.withWatermark("ingest_time", f"{window_s} seconds")
    if dedupe == DEDUPE_SCAN:
        return watermarked.dropDuplicatesWithinWatermark(["event_id"])
    from pyspark.sql import DataFrame

    spark = valid.sparkSession
    operator = spark._jvm
    for part in FIRST_COPY_CLASS.split("."):
        operator = getattr(operator, part)
    order = spark._sc._gateway.new_array(spark._jvm.java.lang.String, len(ORDER) - 1)
    for i, column in enumerate(ORDER[1:]):
        order[i] = column
    return DataFrame(operator.firstCopies(watermarked._jdf, "event_id", ORDER[0], window_s * 1000, order), spark)


def dedupe_of(marker) -> str:
    """The operator a checkpoint's marker says its de-duplication state was made by."""
    return marker.dedupe if marker is not None and marker.dedupe is not None else DEDUPE_SCAN
