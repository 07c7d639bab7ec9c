"""The speed layer's de-duplication: of the copies of an event id ingested within
`speed.dedupe_window_s`, only the first counts.

A new checkpoint keeps that state with event-time timers (speed_layer/jvm/FirstCopyWithinWindow.java,
stores.checkpoints.DEDUPE_TIMERS): a micro-batch reads only the ids that expire, so its cost follows
what arrives, not how many events the window holds. Spark's dropDuplicatesWithinWatermark, which
reads its whole state at every micro-batch to find what to forget (about a microsecond per event held),
goes on running a checkpoint made with it (DEDUPE_SCAN): the other operator cannot read its state.
`lambdactl reset-speed` moves such a checkpoint to the timers."""

from __future__ import annotations

from definitions.settings import Settings
from stores.checkpoints import DEDUPE_SCAN, DEDUPE_TIMERS

# speed_layer/jvm, compiled by infra/compile_jvm.sh into the jars every platform session carries.
FIRST_COPY_CLASS = "lambdaplatform.speed.FirstCopyWithinWindow"


def first_copies_within_window(valid, settings: Settings, dedupe: str = DEDUPE_TIMERS):
    """The first copy of each event id among the streaming frame `valid` (validated events with
    `event_id` and `ingest_time`), a watermark of the window on `ingest_time`; rows older than the
    watermark are dropped as late (Spark counts them in the operator's numRowsDroppedByWatermark)."""
    if dedupe not in (DEDUPE_TIMERS, DEDUPE_SCAN):
        raise ValueError(f"unknown de-duplication operator {dedupe!r}: {DEDUPE_TIMERS!r} or {DEDUPE_SCAN!r}")
    window_s = settings.speed.dedupe_window_s
    watermarked = valid.withWatermark("ingest_time", f"{window_s} seconds")
    if dedupe == DEDUPE_SCAN:
        return watermarked.dropDuplicatesWithinWatermark(["event_id"])
    from pyspark.sql import DataFrame

    spark = valid.sparkSession
    operator = spark._jvm
    for part in FIRST_COPY_CLASS.split("."):
        operator = getattr(operator, part)
    return DataFrame(operator.firstCopies(watermarked._jdf, "event_id", "ingest_time", window_s * 1000), spark)


def dedupe_of(marker) -> str:
    """The operator a checkpoint's marker says its de-duplication state was made by."""
    return marker.dedupe if marker is not None and marker.dedupe is not None else DEDUPE_SCAN
