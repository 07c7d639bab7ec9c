"""Reading topic `events` in Spark, the same way in every job: parsed and validated by the event contract.

`validated_events` returns one row per Kafka record with the validation verdict (`reason` is null
for a valid event), the typed event fields, and where the record came from (partition, offset,
ingest time). Tick records (see ingest.ticker: the tick key and an empty value) are dropped here:
they carry no event (the speed layer keeps those the broker stamped, with TICK_REASON, to move its
watermark). Every other record gets a verdict: validation is a total function, so no
record can fail the query (see docs/security.md).

The verdict comes from the contract's JVM validator (definitions/jvm/ValidateEvent.java): the same
rules, limits and reasons as definitions.events.validate, read from `contract_json`, with no
Python worker per task. tests/unit/ingest/test_validation_parity.py holds the two to each other.
"""

from typing import TYPE_CHECKING

from definitions.events import FIELD_NAMES, JVM_VALIDATOR_CLASS, TICK_KEY, VALIDATION_DDL, contract_json
from definitions.layer_settings import EventLimits
from definitions.settings import Settings
from stores.clients import kafka_spark_options
from stores.kafka import ISOLATION_LEVEL

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

SOURCE_COLUMNS = ("kafka_partition", "kafka_offset", "ingest_time")
VALIDATOR_FUNCTION = "lambda_validate_event"


# A task's range of offsets ends at the end of the log, often after a transaction's commit marker,
# which is no record: the consumer's fetch there waits for data up to fetch.max.wait.ms (Kafka's
# default 500 ms) before the task can end. Every micro-batch paid it, once per wave of tasks.
FETCH_MAX_WAIT_MS = 10


def kafka_source_options(settings: Settings) -> dict[str, str]:
    """Spark's Kafka source options for topic `events`: the brokers and security, and committed
    records only (an aborted transaction's records are no events; stores.kafka.ISOLATION_LEVEL)."""
    return {
        **kafka_spark_options(settings),
        "kafka.isolation.level": ISOLATION_LEVEL,
        "kafka.fetch.max.wait.ms": str(FETCH_MAX_WAIT_MS),
    }


def kafka_stream(
    spark: "SparkSession",
    settings: Settings,
    max_offsets_per_trigger: "int | None" = None,
    fail_on_data_loss: bool = True,
) -> "DataFrame":
    """`events` as a stream. It fails on records Kafka deleted before they were read unless
    `fail_on_data_loss` is False: a loss the operator accepted (stores.kafka_gaps)."""
    reader = (
        spark.readStream.format("kafka")
        .options(**kafka_source_options(settings))
        .option("subscribe", settings.kafka.events_topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", str(fail_on_data_loss).lower())
    )
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load()


def kafka_range(spark: "SparkSession", settings: Settings, offsets: dict[int, tuple[int, int]]) -> "DataFrame":
    """A static read of topic `events`: per partition, the records of offsets [start, end). The read
    is assigned exactly those partitions: Spark's reader refuses offsets naming part of a subscribed
    topic's partitions (a replay leaves out those its span holds no record of)."""
    import json

    topic = settings.kafka.events_topic
    return (
        spark.read.format("kafka")
        .options(**kafka_source_options(settings))
        .option("assign", json.dumps({topic: sorted(offsets)}))
        .option("startingOffsets", json.dumps({topic: {str(p): s for p, (s, _) in offsets.items()}}))
        .option("endingOffsets", json.dumps({topic: {str(p): e for p, (_, e) in offsets.items()}}))
        .option("failOnDataLoss", "true")
        .load()
    )


def kafka_sink_options(settings: Settings) -> dict[str, str]:
    """The brokers and security options of a Spark query writing to Kafka (the dead letters)."""
    return kafka_spark_options(settings)


def register_validator(spark: "SparkSession") -> str:
    """The contract's JVM validator (definitions/jvm, in spark.jars) as a SQL function; its name."""
    spark.udf.registerJavaFunction(VALIDATOR_FUNCTION, JVM_VALIDATOR_CLASS, VALIDATION_DDL)
    return VALIDATOR_FUNCTION


LOG_APPEND_TIME = 1  # Spark's Kafka source: timestampType 0 is CreateTime (the producer's), 1 the broker's
PRODUCER_STAMP_REASON = (
    "producer timestamp: the record's Kafka timestamp is its producer's (CreateTime), not the broker's "
    "ingest time (topic events must use message.timestamp.type=LogAppendTime)"
)

# The reason a tick carries where a reader keeps it (validated_events(keep_ticks=True)): no event.
TICK_REASON = "tick: the archiver's mark of time on a partition, not an event"


def kept_tick() -> "Column":
    """Whether a validated record is a tick kept with validated_events(keep_ticks=True)."""
    from pyspark.sql import functions as F

    return F.coalesce(F.col("reason") == F.lit(TICK_REASON), F.lit(False))


def validated_events(
    records: "DataFrame", limits: EventLimits, keep_key: bool = False, keep_ticks: bool = False
) -> "DataFrame":
    """Kafka rows → verdict, typed event fields (event_time as a timestamp) and source position;
    with `keep_key`, the record's key too (`raw_key`: what a dead letter keeps). Ticks are dropped;
    with `keep_ticks`, those the broker stamped are kept, with the reason TICK_REASON (what moves
    the speed layer's watermark when no event arrives)."""
    from pyspark.sql import functions as F

    function = register_validator(records.sparkSession)
    contract = F.lit(contract_json(limits))
    checked = F.call_function(function, F.col("value"), F.unix_millis(F.col("timestamp")), contract).alias("v")
    # A tick has an empty value (ingest/ticker.py); a tombstone under its key is no tick: refused.
    is_tick = F.coalesce((F.col("key") == F.lit(TICK_KEY)) & (F.length("value") == 0), F.lit(False))
    # The record's timestamp is its ingest time only when the broker stamped it: the jobs check the
    # topic's setting at start, but records stored before it (or while it was changed) keep their
    # producer's stamp, which would move the speed layer's watermark, completeness and the master
    # dataset's ingest date wherever the producer chose.
    stamp = F.when(F.col("timestampType") != LOG_APPEND_TIME, F.lit(PRODUCER_STAMP_REASON))
    broker_stamped = F.coalesce(F.col("timestampType") == LOG_APPEND_TIME, F.lit(False))
    kept = (~is_tick | broker_stamped) if keep_ticks else ~is_tick
    return (
        records.where(kept)
        .select(
            checked,
            F.coalesce(stamp, F.when(is_tick, F.lit(TICK_REASON))).alias("stamp_reason"),
            F.col("value").alias("raw"),
            *([F.col("key").alias("raw_key")] if keep_key else []),
            F.col("topic").alias("kafka_topic"),
            F.col("partition").alias("kafka_partition"),
            F.col("offset").alias("kafka_offset"),
            F.col("timestamp").alias("ingest_time"),
        )
        .select(
            F.coalesce(F.col("stamp_reason"), F.col("v.reason")).alias("reason"),
            *[
                (F.timestamp_millis(F.col("v.event_time")) if name == "event_time" else F.col(f"v.{name}")).alias(name)
                for name in FIELD_NAMES
            ],
            "raw",
            *(["raw_key"] if keep_key else []),
            "kafka_topic",
            *SOURCE_COLUMNS,
        )
    )
