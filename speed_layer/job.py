"""The speed layer: every declared view, incrementally, from topic `events` into Cassandra.

One Structured Streaming query:
  Kafka → the event contract's validation (invalid records skipped and counted) → watermark on
  ingest time → de-duplication by event_id within the watermark → every view's cells (one per
  view and granularity, derived from the declarations) → one stateful aggregation keyed by
  (view, granularity, key, event bucket, ingest bucket) on the RocksDB state store with changelog
  checkpointing, checkpoint on HDFS → foreachBatch: upsert the updated groups' absolute values
  into Cassandra.

Absolute values make replays harmless: after a crash the last micro-batch is recomputed from
the checkpointed state and writes the same values again.

Run: `python -m speed_layer.job` (`lambdactl up` does). Nothing starts at import time.
"""

from __future__ import annotations

import logging
import sys

from definitions import jobs
from definitions.logs import configure_from
from definitions.settings import Settings, get_settings
from definitions.views import HLL_LG_K, key_text, load_views
from definitions.views import cells as view_cells
from stores import health
from stores.adapters import RealtimeWriterAdapter
from stores.kafka_source import kafka_stream, validated_events
from stores.progress import ProgressFile
from stores.realtime import RealtimeRow
from stores.registry import realtime_writer

log = logging.getLogger("lambda.speed")

JOB = jobs.SPEED_LAYER
QUERY = jobs.SPEED_QUERY


def aggregated_cells(spark, settings: Settings):
    """The streaming DataFrame of per-(view, granularity, key, event bucket, ingest bucket) aggregates."""
    from pyspark.sql import functions as F

    registry = load_views(settings)
    events = validated_events(kafka_stream(spark, settings, settings.speed.max_offsets_per_trigger), settings.events)
    counted = events.observe(
        "speed_input",
        F.count(F.lit(1)).alias("records"),
        F.sum(F.when(F.col("reason").isNotNull(), 1).otherwise(0)).alias("invalid_skipped"),
    )
    valid = (
        counted.where(F.col("reason").isNull())
        .withWatermark("ingest_time", f"{settings.speed.dedupe_window_s} seconds")
        .dropDuplicatesWithinWatermark(["event_id"])
    )
    all_cells = [cell for view in registry for cell in view_cells(view)]
    exploded = valid.select(
        "ingest_time",
        F.explode(F.filter(F.array(*all_cells), lambda c: c.isNotNull())).alias("c"),
    )
    bucket = f"{settings.ingest_bucket_s} seconds"
    return (
        exploded.groupBy(
            F.col("c.view").alias("view"),
            F.col("c.granularity").alias("granularity"),
            F.col("c.key").alias("key"),
            F.col("c.event_bucket").alias("event_bucket"),
            F.window("ingest_time", bucket).alias("ingest_window"),
        )
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.sum("c.measure").alias("total"),
            F.hll_sketch_agg("c.distinct_value", HLL_LG_K).alias("sketch"),
        )
        .select(
            "view",
            "granularity",
            "key",
            "event_bucket",
            F.unix_seconds(F.col("ingest_window.start")).alias("ingest_bucket"),
            "n",
            "total",
            "sketch",
            F.hll_sketch_estimate("sketch").alias("estimate"),
        )
    )


class BatchWriter:
    """foreachBatch sink: the micro-batch's updated groups, as absolute values, into Cassandra."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.registry = load_views(settings)
        self.writer: RealtimeWriterAdapter | None = None

    def __call__(self, batch_df, batch_id: int) -> None:
        if self.writer is None:
            self.writer = realtime_writer(self.settings)
        by_key: list[RealtimeRow] = []
        by_bucket: list[RealtimeRow] = []
        # One job over every partition at once, through Arrow (toLocalIterator ran one job per
        # partition, one after another, so the state stores' work never overlapped).
        for row in batch_df.toArrow().to_pylist():
            view = self.registry[row["view"]]
            if view.aggregation == "count":
                value = row["n"]
            elif view.aggregation == "sum":
                value = int(row["total"] or 0)
            else:
                value = int(round(row["estimate"]))
            cell = RealtimeRow(
                view.name,
                row["granularity"],
                key_text(row["key"]),
                row["event_bucket"],
                row["ingest_bucket"],
                int(value),
                bytes(row["sketch"]) if view.aggregation == "distinct" else None,
            )
            (by_bucket if view.layout == "by_bucket" else by_key).append(cell)
        self.writer.write(by_key, by_bucket)
        log.info("batch %d: %d realtime rows upserted", batch_id, len(by_key) + len(by_bucket))


def check_checkpoint_settings(settings: Settings) -> None:
    """The aggregation state depends on the ingest bucket size: refuse to resume a checkpoint made
    with another one (its windows would be wrong), and record the size of a new checkpoint."""
    from stores import checkpoints

    marker = checkpoints.read_marker(settings)
    made_with = None if marker is None else marker.ingest_bucket_s
    if marker is None:
        checkpoints.write_marker(settings)
    elif marker.started_ms is None and made_with == settings.ingest_bucket_s:
        # A marker from before start times were recorded: it was written at the first start.
        checkpoints.write_marker(settings, checkpoints.file_written_ms(settings))
    if made_with is not None and made_with != settings.ingest_bucket_s:
        raise SystemExit(
            f"the speed layer's checkpoint {settings.speed.checkpoint_dir} was made with ingest_bucket_s="
            f"{made_with}, settings say {settings.ingest_bucket_s}: keep {made_with}, or remove the checkpoint "
            "and its marker (the speed layer then recomputes from the earliest Kafka offset)"
        )


def run(settings: Settings) -> int:
    from definitions.spark import spark_session, stop_on_signal, watch_queries

    health.wait_until_up(settings, {"kafka": health.kafka, "hdfs": health.hdfs_namenode, "cassandra": health.cassandra})
    check_checkpoint_settings(settings)
    spark = spark_session(
        settings,
        "lambda-speed-layer",
        {
            "spark.driver.memory": settings.speed.driver_memory,
            "spark.sql.shuffle.partitions": str(settings.speed.shuffle_partitions),
            "spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        },
    )
    progress = ProgressFile(
        settings,
        JOB,
        extra={"ingest_bucket_s": settings.ingest_bucket_s, "dedupe_window_s": settings.speed.dedupe_window_s},
    )
    spark.streams.addListener(progress.listener())
    stopping = stop_on_signal("the speed layer")
    writer = BatchWriter(settings)
    query = (
        aggregated_cells(spark, settings)
        .writeStream.queryName(QUERY)
        .outputMode("update")
        .foreachBatch(writer)
        .option("checkpointLocation", f"{settings.hdfs.url}{settings.speed.checkpoint_dir}")
        .trigger(processingTime=f"{settings.speed.trigger_s} seconds")
        .start()
    )
    log.info(
        "speed layer running: %s → Cassandra %s (trigger %ss, de-duplication window %ss, ingest bucket %ss)",
        settings.kafka.events_topic,
        settings.cassandra.keyspace,
        settings.speed.trigger_s,
        settings.speed.dedupe_window_s,
        settings.ingest_bucket_s,
    )
    try:
        return watch_queries((query,), stopping)
    finally:
        if writer.writer is not None:
            writer.writer.close()
        spark.stop()


def main() -> int:
    settings = get_settings()
    configure_from("speed-layer", settings)
    return run(settings)


if __name__ == "__main__":
    sys.exit(main())
