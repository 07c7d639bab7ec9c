"""Reading topic `events` in Spark, the same way in every job: parsed and validated by the event contract.

`validated_events` returns one row per Kafka record with the validation verdict (`reason` is null
for a valid event), the typed event fields, and where the record came from (partition, offset,
ingest time). Tick records (see ingest.ticker: the tick key and an empty value) are dropped here:
they carry no event. Every other record gets a verdict: validation is a total function, so no
record can fail the query (see docs/security.md).
"""

# No `from __future__ import annotations` here: pandas_udf reads the UDF's type hints at run time.
from typing import TYPE_CHECKING

from definitions.events import FIELD_NAMES, TICK_KEY, VALIDATION_DDL, verdict
from definitions.settings import EventLimits, Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SOURCE_COLUMNS = ("kafka_partition", "kafka_offset", "ingest_time")


def kafka_stream(
    spark: "SparkSession", settings: Settings, max_offsets_per_trigger: "int | None" = None
) -> "DataFrame":
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka.bootstrap)
        .option("subscribe", settings.kafka.events_topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
    )
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load()


def _validator(limits: "EventLimits"):
    """The contract's Python validator as a vectorised Spark UDF (built lazily: no Spark at import)."""
    import pandas as pd
    from pyspark.sql.functions import pandas_udf

    empty = {name: None for name in FIELD_NAMES}

    # pyspark's stubs lack the type-hinted form `pandas_udf(returnType)` (Spark >= 3.0), used here.
    @pandas_udf(VALIDATION_DDL)  # type: ignore[call-overload]
    def validate_records(values: pd.Series, ingest_ms: pd.Series) -> pd.DataFrame:
        rows = []
        for raw, ingest in zip(values, ingest_ms):
            event, reason = verdict(raw, int(ingest), limits)
            rows.append({"reason": None, **event} if event is not None else {"reason": reason, **empty})
        frame = pd.DataFrame(rows, columns=["reason", *FIELD_NAMES])
        for name in ("event_time", "schema_version"):
            frame[name] = frame[name].astype("Int64")
        return frame

    return validate_records


def validated_events(records: "DataFrame", limits: EventLimits) -> "DataFrame":
    """Kafka rows → verdict, typed event fields (event_time as a timestamp) and source position."""
    from pyspark.sql import functions as F

    checked = _validator(limits)(F.col("value"), F.unix_millis(F.col("timestamp"))).alias("v")
    is_tick = (F.col("key") == F.lit(TICK_KEY)) & (F.col("value").isNull() | (F.length("value") == 0))
    return (
        records.where(~F.coalesce(is_tick, F.lit(False)))
        .select(
            checked,
            F.col("value").alias("raw"),
            F.col("topic").alias("kafka_topic"),
            F.col("partition").alias("kafka_partition"),
            F.col("offset").alias("kafka_offset"),
            F.col("timestamp").alias("ingest_time"),
        )
        .select(
            F.col("v.reason").alias("reason"),
            *[
                (F.timestamp_millis(F.col("v.event_time")) if name == "event_time" else F.col(f"v.{name}")).alias(name)
                for name in FIELD_NAMES
            ],
            "raw",
            "kafka_topic",
            *SOURCE_COLUMNS,
        )
    )
