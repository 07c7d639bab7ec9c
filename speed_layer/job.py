"""The speed layer: every declared view, incrementally, from topic `events` into Cassandra.

One Structured Streaming query:
  Kafka → the event contract's validation (invalid records skipped and counted) → watermark on
  ingest time → de-duplication by event_id within the watermark → every view's cells (one per
  view and granularity, derived from the declarations; views with the same cells share them) →
  one stateful aggregation keyed by (cells' label, granularity, key, event bucket, ingest bucket)
  on the RocksDB state store with changelog checkpointing, checkpoint on HDFS → foreachBatch:
  upsert the updated groups' absolute values into Cassandra, under every view they are cells of.

Absolute values make replays harmless: after a crash the last micro-batch is recomputed from
the checkpointed state and writes the same values again.

Run: `python -m speed_layer.job` (`lambdactl up` does). Nothing starts at import time.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from definitions import jobs
from definitions.events import FIELD_NAMES
from definitions.executor_settings import executor_settings
from definitions.files import run_alone
from definitions.logs import configure_from
from definitions.python_workers import skip_unchanged_zip_rereads
from definitions.settings import Settings, process_settings
from definitions.spark import trigger_interval
from definitions.view_loading import load_views
from definitions.views import HLL_LG_K, Registry, View, cell_groups, key_text
from definitions.views import cells as view_cells
from speed_layer.checkpoint_start import check_checkpoint_settings
from speed_layer.first_copies import dedupe_of, first_copies_within_window
from speed_layer.late_drops import late_drops_recorder, record_pending_late_drops
from stores import checkpoints, health, kafka_gaps
from stores.kafka_source import kafka_stream, kept_tick, validated_events
from stores.kafka_topic_config import check_timestamp_type
from stores.master import first_copies
from stores.progress import HdfsPublisher, ProgressFile
from stores.realtime import RealtimeRow
from stores.registry import process_realtime_writer, realtime_writer

log = logging.getLogger("lambda.speed")

JOB = jobs.SPEED_LAYER
QUERY = jobs.SPEED_QUERY

# The aggregation holds a HyperLogLog sketch per group, so Spark aggregates by objects, and by default
# sorts a task's rows instead once it holds 128 groups: a micro-batch has thousands (views × keys ×
# buckets). Kept in memory up to 65,536 groups a task (then sorted, spilling as before): a sketch
# outgrows a few bytes only past hundreds of values, so with up to 400,000 records a micro-batch
# (speed.max_offsets_per_trigger) a task's groups hold tens of MB at most. Micro-batches of 60,000
# events without Kafka or Cassandra:
# medians 1,676 and 1,594 ms against 2,082 and 1,959 ms with Spark's default, 1.24×
# (bench/speed_aggregation_cost.py --rows 60000 --duration 120 --pairs 2, 2026-12-04).
AGGREGATION_OPTIONS = {"spark.sql.objectHashAggregate.sortBased.fallbackThreshold": "65536"}

# Both stateful operators keep their state in RocksDB (off the JVM heap), and a micro-batch commits
# only its changes to the checkpoint, not a snapshot of the whole state. RocksDB does not count the
# rows it holds: counting reads every key before writing it (a get per put), and the de-duplication
# writes one key per input record. Sustained input, Kafka's console producer sending (`bench/
# speed_freshness.py --native --skip-freshness --step-duration 60`, test-settings stack, 2026-12-06):
# counting, 12,000 records/s sustained and 15,000 not (2 runs); not counting, 15,000 sustained (3
# runs); batch-cost fits 60.0 and 40.2 µs per record counting, 34.8, 35.2 and 28.2 not. The progress
# shows the state's memory instead of its rows (stores.progress).
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
STATE_ROWS_COUNTED = False
STATE_STORE_OPTIONS = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": str(STATE_ROWS_COUNTED).lower(),
}


def aggregated_cells(spark, settings: Settings, registry: Registry, fail_on_data_loss: bool, dedupe: str, shared: bool):
    """The streaming DataFrame of per-(cells' label, granularity, key, event bucket, ingest bucket)
    aggregates of the views in `registry` (under their storage names: definitions.view_versions);
    `dedupe` the de-duplication operator the checkpoint's state is made by (speed_layer.first_copies),
    `shared` whether it labels cells once for the views that have the same (definitions.views.cell_groups)."""

    stream = kafka_stream(spark, settings, settings.speed.max_offsets_per_trigger, fail_on_data_loss)
    # The ticks stay until the watermark has seen them (speed_layer.first_copies); not input records.
    events = validated_events(stream, settings.events, keep_ticks=True)
    counted = events.observe("speed_input", *input_counts())
    return cells_by_ingest_bucket(counted, list(registry), settings, dedupe=dedupe, shared=shared)


def input_counts() -> list:
    """The records a micro-batch read and the invalid ones it skipped, as observed metrics of
    validated records (ticks are neither)."""
    from pyspark.sql import functions as F

    tick = kept_tick()
    return [
        F.count(F.when(~tick, 1)).alias("records"),
        F.sum(F.when(F.col("reason").isNotNull() & ~tick, 1).otherwise(0)).alias("invalid_skipped"),
    ]


def cells_by_ingest_bucket(
    events,
    views: list[View],
    settings: Settings,
    count_from_ms: int | None = None,
    dedupe: str | None = None,
    shared: bool = False,
):
    """Validated events (streaming, or a static read of Kafka for a replay) → the views' aggregates per
    (label, granularity, key, event bucket, ingest bucket), the label naming the view, or with
    `shared` the cells of every view that has them (definitions.views.cell_groups). Copies of an event_id within the dedupe
    window count once (speed_layer.first_copies, by the operator `dedupe`, which a stream must name:
    its checkpoint's state is made by one). On a static DataFrame, whatever `dedupe` says,
    every copy after the first by ingest time is dropped, and only first copies ingested at or after
    `count_from_ms` are counted: a replay reads the dedupe window before its start too, so a copy
    whose first was ingested just before is dropped, as the running speed layer dropped it. Copies
    further apart than the stream's state keeps an event (about 2W) are one here, as in the batch
    layer, and two in the stream's rows."""
    from pyspark.sql import functions as F

    if events.isStreaming:
        if dedupe is None:
            raise ValueError("a streaming frame needs the de-duplication operator its checkpoint's state is made by")
        # The event's fields are what the views read: the raw record stays out of the shuffle.
        valid = first_copies_within_window(events, settings, dedupe, keep=[*FIELD_NAMES, "ingest_time"])
    else:  # a replay: the first copy of each event_id, as the batch layer keeps
        valid = first_copies(events.where(F.col("reason").isNull()))
        if count_from_ms is not None:
            valid = valid.where(F.col("ingest_time") >= F.timestamp_millis(F.lit(count_from_ms)))
    groups = cell_groups(views, shared)
    all_cells = [cell for label, (view, *_) in groups.items() for cell in view_cells(view, label)]
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


# A view as the writers need it: (name, aggregation, layout).
Written = tuple[str, str, str]


def written_views(views: Iterable[View], shared: bool) -> dict[str, list[Written]]:
    """Each label of aggregated cells (cells_by_ingest_bucket with `shared`) → the views it is written as."""
    return {
        label: [(v.name, v.aggregation, v.layout) for v in group] for label, group in cell_groups(views, shared).items()
    }


def realtime_rows(
    views: Mapping[str, list[Written]], records: Iterable[dict]
) -> tuple[list[RealtimeRow], list[RealtimeRow]]:
    """Aggregated records as realtime rows, (by_key, by_bucket): each under every view its label is
    written as (`views`: written_views)."""
    by_key: list[RealtimeRow] = []
    by_bucket: list[RealtimeRow] = []
    for row in records:
        key = key_text(row["key"])
        for name, aggregation, layout in views[row["view"]]:
            if aggregation == "count":
                value = row["n"]
            elif aggregation == "sum":
                value = int(row["total"] or 0)
            else:
                value = int(round(row["estimate"]))
            cell = RealtimeRow(
                name,
                row["granularity"],
                key,
                row["event_bucket"],
                row["ingest_bucket"],
                int(value),
                bytes(row["sketch"]) if aggregation == "distinct" else None,
            )
            (by_bucket if layout == "by_bucket" else by_key).append(cell)
    return by_key, by_bucket


def _written_schema():
    import pyarrow as pa

    return pa.schema([("written", pa.int64()), ("write_ms", pa.int64())])


def partition_writer(settings: Settings, views: Mapping[str, list[Written]], timestamp_us: int):
    """What each task of a micro-batch runs in its executor's Python worker (mapInArrow): write the
    partition's rows, with the batch's write timestamp, through the worker's own realtime writer
    (built at the first rows, so a batch of ticks only never connects); then yield how many it
    wrote and the milliseconds the writes took. Workers are reused from task to task, so each keeps
    one connection to the store. The function carries the settings without the secrets no executor
    uses (definitions.executor_settings)."""
    settings = executor_settings(settings)

    def write(batches: Iterator[Any]) -> Iterator[Any]:
        import time

        import pyarrow as pa

        skip_unchanged_zip_rereads()
        writer = None
        written, spent = 0, 0.0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            started = time.monotonic()
            if writer is None:
                writer = process_realtime_writer(settings)
            by_key, by_bucket = realtime_rows(views, batch.to_pylist())
            writer.write(by_key, by_bucket, timestamp_us)
            spent += time.monotonic() - started
            written += len(by_key) + len(by_bucket)
        yield pa.RecordBatch.from_pydict(
            {"written": [written], "write_ms": [round(spent * 1000)]}, schema=_written_schema()
        )

    return write


class BatchWriter:
    """foreachBatch sink: the micro-batch's updated groups, as absolute values, into Cassandra.

    The executors write, each task its own partition (never through the driver); the driver picks
    the batch's write timestamp (larger than every earlier batch's, so a late retry of an older
    batch never overwrites a newer value) and learns only how many rows were written."""

    def __init__(self, settings: Settings, registry: Registry, shared: bool) -> None:
        self.settings = settings
        self.views = written_views(registry, shared)
        self.last_timestamp_us = 0

    def batch_timestamp_us(self) -> int:
        self.last_timestamp_us = max(time.time_ns() // 1000, self.last_timestamp_us + 1)
        return self.last_timestamp_us

    def __call__(self, batch_df, batch_id: int) -> int:
        from definitions.spark import interrupted_call

        write = partition_writer(self.settings, self.views, self.batch_timestamp_us())
        try:
            # One row per task, summed here: no stage of its own to add them up.
            counts = batch_df.mapInArrow(write, "written long, write_ms long").collect()
        except Exception as exc:
            stopping = interrupted_call(exc)
            if stopping is None:
                raise
            log.info("batch %d: interrupted by the query's stop; it runs again at the next start", batch_id)
            raise stopping from None
        written = sum(row.written for row in counts)
        write_ms = max((row.write_ms for row in counts), default=0)
        log.info(
            "batch %d: %d realtime rows upserted (the longest task wrote for %s ms)",
            batch_id,
            written or 0,
            write_ms or 0,
        )
        return int(written or 0)


def run(settings: Settings) -> int:
    from definitions.spark import spark_session, stop_on_signal, watch_queries

    health.wait_until_up(
        settings,
        {
            "kafka": health.kafka,
            "hdfs": health.hdfs_namenode,
            "cassandra": health.cassandra,
            "hbase": health.hbase_thrift,  # the pointer says which definition answers a changed view
        },
    )
    maintained = check_checkpoint_settings(settings, load_views(settings))
    marker = checkpoints.read_marker(settings)
    dedupe = dedupe_of(marker)
    shared = marker is not None and marker.shares_cells
    record_pending_late_drops(settings)  # before the progress file is written anew
    try:
        check_timestamp_type(settings)
    except RuntimeError as exc:
        log.error("%s", exc)
        return 1
    past = kafka_gaps.accepted_past(settings, JOB)
    spark = spark_session(
        settings,
        "lambda-speed-layer",
        {
            "spark.driver.memory": settings.speed.driver_memory,
            "spark.sql.shuffle.partitions": str(settings.speed.shuffle_partitions),
            **STATE_STORE_OPTIONS,
            **AGGREGATION_OPTIONS,
        },
    )
    progress = ProgressFile(
        settings,
        JOB,
        hooks={QUERY: late_drops_recorder(settings)},
        state_rows_counted=STATE_ROWS_COUNTED,
        extra={
            "ingest_bucket_s": settings.ingest_bucket_s,
            "dedupe_window_s": settings.speed.dedupe_window_s,
            "dedupe_operator": dedupe,  # the one its checkpoint was made with: which one a measurement ran
            "shared_cells": shared,
        },
        publish=HdfsPublisher(settings, JOB),
    )
    spark.streams.addListener(progress.listener())
    stopping = stop_on_signal("the speed layer")
    # The store is reached (and its schema made) before the first batch: a missing store or adapter
    # stops the job here, with its reason, rather than in a task.
    realtime_writer(settings).close()
    writer = BatchWriter(settings, maintained, shared)

    def start(strict: bool) -> tuple:
        return (
            aggregated_cells(spark, settings, maintained, strict, dedupe, shared)
            .writeStream.queryName(QUERY)
            .outputMode("update")
            .foreachBatch(writer)
            .option("checkpointLocation", f"{settings.hdfs.url}{settings.speed.checkpoint_dir}")
            .trigger(processingTime=trigger_interval(settings.speed.trigger_s))
            .start(),
        )

    queries = start(not past)
    log.info(
        "speed layer running: %s → Cassandra %s (trigger %ss, de-duplication window %ss by %s, ingest bucket %ss)",
        settings.kafka.events_topic,
        settings.cassandra.keyspace,
        settings.speed.trigger_s,
        settings.speed.dedupe_window_s,
        dedupe,
        settings.ingest_bucket_s,
    )
    try:
        running = kafka_gaps.strict_once_past(settings, JOB, past, queries, start, stopping)
        return watch_queries(running, stopping)
    finally:
        spark.stop()


def main() -> int:
    from definitions.spark import quiet_interrupted_batches

    settings = process_settings("speed-layer")
    configure_from("speed-layer", settings)
    quiet_interrupted_batches()
    return run_alone(settings.state_dir, JOB, lambda: run(settings))


if __name__ == "__main__":
    sys.exit(main())
