"""The archiver: topic `events` → the immutable master dataset on HDFS, and bad records → `events.dlq`.

Two Structured Streaming queries in one Spark application:
- `archiver-master`: valid events, each with its Kafka partition, offset and ingest time, appended
  as Parquet partitioned by ingest date and hour. The file sink with its checkpoint on HDFS is
  exactly-once: a replayed batch never adds a file twice, and readers see committed files only.
- `archiver-dlq`: invalid records, with the reason, the source partition/offset and the raw bytes
  (cut to `events.max_dlq_raw_bytes`, with their size and SHA-256), produced to `events.dlq`
  (at-least-once; the source position identifies a record).
After each committed master batch, a completeness marker is published (stores.completeness).

Run: `python -m ingest.archiver` (`lambdactl up` does). Nothing starts at import time.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
import time
from collections.abc import Callable

from definitions import jobs
from definitions.events import FIELD_NAMES
from definitions.files import run_alone
from definitions.logs import configure_from
from definitions.settings import Settings, process_settings
from definitions.spark import trigger_interval
from ingest.ticker import Ticker
from stores import completeness, health, kafka_gaps
from stores.kafka_source import SOURCE_COLUMNS, kafka_sink_options, kafka_stream, validated_events
from stores.kafka_topic_config import check_timestamp_type, partition_count
from stores.master import last_archived_batch, master_url
from stores.progress import HdfsPublisher, ProgressFile, source_offsets
from stores.webhdfs import WebHdfs

log = logging.getLogger("lambda.archiver")

JOB = jobs.ARCHIVER
MASTER_QUERY = jobs.ARCHIVER_MASTER_QUERY
DLQ_QUERY = jobs.ARCHIVER_DLQ_QUERY
PARTITION_COLUMNS = ("ingest_date", "ingest_hour")


def with_ingest_partitions(records):
    """`records` with the master dataset's partition columns, from their ingest time (UTC)."""
    from pyspark.sql import functions as F

    return records.withColumn("ingest_date", F.date_format("ingest_time", "yyyy-MM-dd")).withColumn(
        "ingest_hour", F.hour("ingest_time")
    )


def master_writer(records, settings: Settings, checkpoint_url: str, retention: str | None = None):
    """The file sink that appends `records` to the master dataset, one folder per ingest hour (its
    trigger and name still to give). Its log forgets files older than `retention` (a Spark time
    string; default `archiver.sink_log_retention_h`) when it rewrites itself: compacted hours'."""
    return (
        records.writeStream.format("parquet")
        .option("path", master_url(settings))
        .option("checkpointLocation", checkpoint_url)
        .option("retention", retention or f"{settings.archiver.sink_log_retention_h}h")
        .partitionBy(*PARTITION_COLUMNS)
    )


def build_queries(spark, settings: Settings, fail_on_data_loss: bool = True):
    """Start both queries; (master query, dlq query)."""
    from pyspark.sql import functions as F

    a = settings.archiver
    stream = kafka_stream(spark, settings, a.max_offsets_per_trigger, fail_on_data_loss)
    events = validated_events(stream, settings.events, keep_key=True)
    trigger = trigger_interval(a.trigger_s)
    checkpoints = f"{settings.hdfs.url}{a.checkpoint_dir}"

    valid = with_ingest_partitions(events.where(F.col("reason").isNull()).select(*FIELD_NAMES, *SOURCE_COLUMNS))
    valid = valid.observe("archived", F.count(F.lit(1)).alias("events"))
    master = (
        master_writer(valid, settings, f"{checkpoints}/master")
        .queryName(MASTER_QUERY)
        .trigger(processingTime=trigger)
        .start()
    )

    invalid = dead_letters(events.where(F.col("reason").isNotNull()), settings).observe(
        "dead_lettered", F.count(F.lit(1)).alias("records")
    )
    dlq = (
        invalid.writeStream.format("kafka")
        .queryName(DLQ_QUERY)
        .options(**kafka_sink_options(settings))
        .option("topic", settings.kafka.dlq_topic)
        .option("checkpointLocation", f"{checkpoints}/dlq")
        .trigger(processingTime=trigger)
        .start()
    )
    return master, dlq


# Every key of the envelope in every dead letter: a record without a value (a tombstone) has null
# raw_* fields, where Spark's default left them out.
DEAD_LETTER_JSON = {"ignoreNullFields": "false"}


# Bytes of the source record's key kept in its dead letter (a user_id: 128 characters at most in a
# valid event), with its size and SHA-256 as for the value.
DLQ_KEY_BYTES = 1_024


def dead_letters(refused, settings: Settings):
    """Refused records (validated_events with keep_key) → dead-letter Kafka rows: key = the source
    position, value = the envelope: reason, source topic, partition, offset, ingest time, and the
    record's value and key as they came (so a record can be mended and sent again with its key once
    retention deleted the original)."""
    from pyspark.sql import functions as F

    return refused.select(
        F.to_json(F.struct(F.col("kafka_partition").alias("partition"), F.col("kafka_offset").alias("offset"))).alias(
            "key"
        ),
        F.to_json(
            F.struct(
                "reason",
                F.col("kafka_topic").alias("source_topic"),
                F.col("kafka_partition").alias("source_partition"),
                F.col("kafka_offset").alias("source_offset"),
                F.date_format("ingest_time", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").alias("ingest_time"),
                *dead_letter_raw(F.col("raw"), settings.events.max_dlq_raw_bytes),
                *dead_letter_raw(F.col("raw_key"), min(DLQ_KEY_BYTES, settings.events.max_dlq_raw_bytes), "key"),
            ),
            DEAD_LETTER_JSON,
        ).alias("value"),
    )


def dead_letter_raw(raw, keep_bytes: int, name: str = "raw") -> list:
    """Raw bytes in a dead letter (`name`: the record's value, "raw", or its key): the first
    `keep_bytes` bytes (base64), the size and SHA-256, and whether they were cut, so that an envelope
    always fits in one Kafka record."""
    from pyspark.sql import functions as F

    size = F.length(raw)
    return [
        F.base64(F.substring(raw, 1, keep_bytes)).alias(f"{name}_base64"),
        size.alias(f"{name}_bytes"),
        F.coalesce(size > F.lit(keep_bytes), F.lit(False)).alias(f"{name}_truncated"),
        F.sha2(raw, 256).alias(f"{name}_sha256"),
    ]


def check_checkpoint_kept(settings: Settings) -> int | None:
    """Exit (SystemExit, the reason in the log) when the master query's checkpoint and the master
    dataset do not go together:
    - it planned fewer batches than the master holds (the checkpoint was deleted, lost or restored
      from an older copy): Spark's file sink skips every batch id its log already holds, so the
      checkpoint's next batches (Kafka's earliest offsets on, for a new one) would be read and never
      written;
    - it committed batches while the master holds none (archiver.master_path changed);
    - it committed more batches than the master holds (the master was restored from an older copy):
      the batches between would never be archived again.
    Otherwise the last batch the master holds, which the checkpoint planned too (None: none yet): a
    completeness marker of a later batch is of an earlier archive, since a marker is published only
    after its batch is in the master."""
    checkpoint = kafka_gaps.checkpoint_dirs(settings, JOB)[0]
    with WebHdfs(settings) as fs:
        planned = max((int(name) for name in fs.list(f"{checkpoint}/offsets") if name.isdigit()), default=None)
        committed = max((int(name) for name in fs.list(f"{checkpoint}/commits") if name.isdigit()), default=None)
        last = last_archived_batch(fs, settings)
    if last is None and committed is not None:
        # The file sink logs a batch before the checkpoint commits it: the archive is elsewhere now.
        log.error(
            "the archiver's checkpoint %s has committed batches up to %s, but the master dataset %s holds no batch "
            "(no _spark_metadata): archiver.master_path changed, or the dataset was removed without its checkpoint. "
            "Resumed, the archiver would write only new records there and the next batch run would drop every "
            "record archived before. Not starting: set archiver.master_path back, or to rebuild the master from "
            "Kafka remove the checkpoint too (docs/operations.md)",
            checkpoint,
            committed,
            settings.archiver.master_path,
        )
        raise SystemExit(1)
    if last is not None and committed is not None and committed > last:
        # The file sink logs a batch before the checkpoint commits it: the master lost batches since.
        log.error(
            "the archiver's checkpoint %s has committed batches up to %d, but the master dataset %s holds batches 0 "
            "to %d: it was restored from an older copy, or its log cut short. Resumed, the archiver would go on "
            "after batch %d, and the records of batches %d to %d would never be archived again while the "
            "completeness markers claim them. Not starting: restore the master dataset that goes with the "
            "checkpoint, or rebuild the master from Kafka (docs/operations.md)",
            checkpoint,
            committed,
            settings.archiver.master_path,
            last,
            committed,
            last + 1,
            committed,
        )
        raise SystemExit(1)
    if last is None or (planned is not None and planned >= last):
        return last
    log.error(
        "the archiver's checkpoint %s has planned %s, but the master dataset %s holds batches 0 to %d: Spark's "
        "file sink would skip the records of the checkpoint's next batches up to %d as already written. Not "
        "starting: restore the checkpoint (docs/operations.md)",
        checkpoint,
        "no batch" if planned is None else f"batches up to {planned}",
        settings.archiver.master_path,
        last,
        last,
    )
    raise SystemExit(1)


def completeness_hook(settings: Settings, partitions: Callable[[], int]):
    """After each committed master batch: publish the completeness marker, keep it in the progress
    file. The marker expects as many partitions as `events` has now (`partitions()`): one added
    while the archiver runs holds completeness back until the batch's offsets include it."""

    def publish(p) -> dict:
        expected = partitions()
        end = source_offsets(p.sources[0].endOffset).get(settings.kafka.events_topic, {})
        parts = completeness.progress_from_end_offsets(settings, end)
        marker = completeness.Completeness(p.batchId, int(time.time() * 1000), parts, expected)
        completeness.publish(settings, marker)
        return {"completeness": json.loads(marker.to_json())}

    return publish


def run(settings: Settings) -> int:
    from definitions.spark import spark_session, stop_on_signal, watch_queries

    health.wait_until_up(settings, {"kafka": health.kafka, "hdfs": health.hdfs_namenode})
    try:
        check_timestamp_type(settings)
    except RuntimeError as exc:
        log.error("%s", exc)
        return 1
    completeness.drop_beyond(settings, check_checkpoint_kept(settings))
    past = kafka_gaps.accepted_past(settings, JOB)
    partitions = functools.partial(partition_count, settings, settings.kafka.events_topic)
    spark = spark_session(settings, "lambda-archiver", {"spark.driver.memory": settings.archiver.driver_memory})
    progress = ProgressFile(
        settings, JOB, {MASTER_QUERY: completeness_hook(settings, partitions)}, publish=HdfsPublisher(settings, JOB)
    )
    spark.streams.addListener(progress.listener())
    ticker = Ticker(settings)
    stopping = stop_on_signal("the archiver's queries")
    queries = build_queries(spark, settings, not past)
    ticker.start()
    log.info(
        "archiving %s → %s (trigger %ss); dead letters → %s",
        settings.kafka.events_topic,
        master_url(settings),
        settings.archiver.trigger_s,
        settings.kafka.dlq_topic,
    )
    try:
        start = functools.partial(build_queries, spark, settings)
        running = kafka_gaps.strict_once_past(settings, JOB, past, queries, start, stopping)
        return watch_queries(running, stopping)
    finally:
        ticker.stop()
        spark.stop()


def main() -> int:
    settings = process_settings("archiver")
    configure_from("archiver", settings)
    return run_alone(settings.state_dir, JOB, lambda: run(settings))


if __name__ == "__main__":
    sys.exit(main())
