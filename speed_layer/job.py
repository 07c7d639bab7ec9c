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
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from definitions import jobs
from definitions.logs import configure_from
from definitions.settings import Settings, process_settings
from definitions.spark import trigger_interval
from definitions.view_loading import load_views
from definitions.views import HLL_LG_K, Registry, View, key_text
from definitions.views import cells as view_cells
from stores import health, kafka_gaps
from stores.kafka import check_timestamp_type
from stores.kafka_source import kafka_stream, validated_events
from stores.master import first_copies
from stores.progress import HdfsPublisher, ProgressFile, dropped_by_watermark, watermark_ms
from stores.realtime import RealtimeRow
from stores.registry import process_realtime_writer, realtime_writer

log = logging.getLogger("lambda.speed")

JOB = jobs.SPEED_LAYER
QUERY = jobs.SPEED_QUERY


def aggregated_cells(spark, settings: Settings, registry: Registry, fail_on_data_loss: bool = True):
    """The streaming DataFrame of per-(view, granularity, key, event bucket, ingest bucket) aggregates
    of the views in `registry` (under their storage names: definitions.view_versions)."""
    from pyspark.sql import functions as F

    stream = kafka_stream(spark, settings, settings.speed.max_offsets_per_trigger, fail_on_data_loss)
    events = validated_events(stream, settings.events)
    counted = events.observe(
        "speed_input",
        F.count(F.lit(1)).alias("records"),
        F.sum(F.when(F.col("reason").isNotNull(), 1).otherwise(0)).alias("invalid_skipped"),
    )
    return cells_by_ingest_bucket(counted, list(registry), settings)


def cells_by_ingest_bucket(events, views: list[View], settings: Settings, count_from_ms: int | None = None):
    """Validated events (streaming, or a static read of Kafka for a replay) → the views' aggregates per
    (view, granularity, key, event bucket, ingest bucket). Copies of an event_id within the dedupe
    window count once. On a static DataFrame every copy after the first by ingest time is dropped,
    and only first copies ingested at or after `count_from_ms` are counted: a replay reads the dedupe
    window before its start too, so a copy whose first was ingested just before is dropped, as the
    running speed layer dropped it."""
    from pyspark.sql import functions as F

    valid = events.where(F.col("reason").isNull())
    if valid.isStreaming:
        valid = valid.withWatermark(
            "ingest_time", f"{settings.speed.dedupe_window_s} seconds"
        ).dropDuplicatesWithinWatermark(["event_id"])
    else:  # a replay: the first copy of each event_id, as the batch layer keeps
        valid = first_copies(valid)
        if count_from_ms is not None:
            valid = valid.where(F.col("ingest_time") >= F.timestamp_millis(F.lit(count_from_ms)))
    all_cells = [cell for view in views for cell in view_cells(view)]
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


def realtime_rows(
    views: Mapping[str, tuple[str, str]], records: Iterable[dict]
) -> tuple[list[RealtimeRow], list[RealtimeRow]]:
    """Aggregated records as realtime rows, (by_key, by_bucket); `views` maps a view's name to its
    (aggregation, layout)."""
    by_key: list[RealtimeRow] = []
    by_bucket: list[RealtimeRow] = []
    for row in records:
        aggregation, layout = views[row["view"]]
        if aggregation == "count":
            value = row["n"]
        elif aggregation == "sum":
            value = int(row["total"] or 0)
        else:
            value = int(round(row["estimate"]))
        cell = RealtimeRow(
            row["view"],
            row["granularity"],
            key_text(row["key"]),
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


def partition_writer(settings: Settings, views: Mapping[str, tuple[str, str]], timestamp_us: int):
    """What each task of a micro-batch runs in its executor's Python worker (mapInArrow): write the
    partition's rows, with the batch's write timestamp, through the worker's own realtime writer
    (built at the first rows, so a batch of ticks only never connects); then yield how many it
    wrote and the milliseconds the writes took. Workers are reused from task to task, so each keeps
    one connection to the store."""

    def write(batches: Iterator[Any]) -> Iterator[Any]:
        import time

        import pyarrow as pa

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

    def __init__(self, settings: Settings, registry: Registry) -> None:
        self.settings = settings
        self.views = {view.name: (view.aggregation, view.layout) for view in registry}
        self.last_timestamp_us = 0

    def batch_timestamp_us(self) -> int:
        self.last_timestamp_us = max(time.time_ns() // 1000, self.last_timestamp_us + 1)
        return self.last_timestamp_us

    def __call__(self, batch_df, batch_id: int) -> int:
        from pyspark.sql import functions as F

        from definitions.spark import interrupted_call

        write = partition_writer(self.settings, self.views, self.batch_timestamp_us())
        counts = batch_df.mapInArrow(write, "written long, write_ms long")
        try:
            written, write_ms = counts.agg(F.sum("written"), F.max("write_ms")).collect()[0]
        except Exception as exc:
            stopping = interrupted_call(exc)
            if stopping is None:
                raise
            log.info("batch %d: interrupted by the query's stop; it runs again at the next start", batch_id)
            raise stopping from None
        log.info(
            "batch %d: %d realtime rows upserted (the longest task wrote for %s ms)",
            batch_id,
            written or 0,
            write_ms or 0,
        )
        return int(written or 0)


def check_checkpoint_settings(settings: Settings, declared: Registry) -> Registry:
    """The views to maintain, under their storage names: the `declared` ones, plus the definition that
    still answers a view whose declaration changed (definitions.view_versions).

    The aggregation state depends on the ingest bucket size and on each view's definition: refuse to
    resume a checkpoint made with another bucket size (its windows would be wrong) or when a view's
    declaration changed and the definition answering it meanwhile is unknown. Record in the marker
    the size of a new checkpoint, its first start, since when each view is maintained (a view new to
    this start from now: stores.view_lifecycle) and the definition of each."""
    from definitions.view_versions import unresolved_message
    from stores import checkpoints, kafka, kafka_coverage
    from stores.registry import version_store
    from stores.view_lifecycle import maintained_since
    from stores.view_versions import versions_of

    try:
        marker = checkpoints.read_marker(settings)
    except checkpoints.MarkerUnreadable as exc:  # a stop naming it, not a traceback at every restart
        raise SystemExit(str(exc)) from None
    position = checkpoints.speed_layer_position(settings)
    committed = position is not None or checkpoints.speed_layer_committed(settings)
    if not committed:
        # No micro-batch committed (a first start, `lambdactl reset-speed`, the checkpoint removed by
        # hand, the job killed before its first commit): Spark reads Kafka from the earliest offset, so
        # this is a fresh start, marker or not. Kafka must still hold what no batch run absorbed: the
        # reset checked it, but retention may have deleted more since.
        lost = kafka_coverage.unabsorbed_loss(settings)
        if lost:
            then = "`lambdactl reset-speed`" if marker is not None else "`lambdactl up`"
            raise SystemExit(
                f"the speed layer's checkpoint {settings.speed.checkpoint_dir} has no committed micro-batch: a "
                f"fresh start. {kafka_coverage.loss_message(lost)}, then {then}"
            )
        if marker is not None:
            log.warning("the checkpoint has no committed micro-batch: a fresh start (its marker is written anew)")
        marker = None
    if marker is None and committed:
        # Taken for a first start, it would say every view is maintained since time 0 (a view added
        # since would be served exact from any cutoff) and resume windows of an unknown bucket size.
        raise SystemExit(
            f"the speed layer's checkpoint {settings.speed.checkpoint_dir} has committed micro-batches but no "
            "marker (what it was made with): restore the marker, or remove the checkpoint too with `lambdactl "
            "reset-speed` (the speed layer then recomputes from the earliest Kafka offset)"
        )
    if marker is not None and marker.ingest_bucket_s != settings.ingest_bucket_s:
        made_with = marker.ingest_bucket_s
        raise SystemExit(
            f"the speed layer's checkpoint {settings.speed.checkpoint_dir} was made with ingest_bucket_s="
            f"{made_with}, settings say {settings.ingest_bucket_s}: keep {made_with}, or remove the checkpoint "
            "and its marker with `lambdactl reset-speed` (the speed layer then recomputes from the earliest Kafka "
            "offset; docs/operations.md, changing a data-shaping setting)"
        )
    if marker is not None and marker.dedupe_window_s not in (None, settings.speed.dedupe_window_s):
        raise SystemExit(
            f"the speed layer's checkpoint {settings.speed.checkpoint_dir} was made with speed.dedupe_window_s="
            f"{marker.dedupe_window_s}, settings say {settings.speed.dedupe_window_s}: keep "
            f"{marker.dedupe_window_s}, or remove the checkpoint and its marker with `lambdactl reset-speed`"
        )
    versions = versions_of(declared, marker, version_store(settings).pointer())
    if versions.unresolved:
        raise SystemExit(
            f"refusing to resume the checkpoint {settings.speed.checkpoint_dir}: {unresolved_message(versions.unresolved)}"
        )
    maintained = versions.maintained
    names = maintained.names()
    definitions = {v.name: v.fingerprint for v in maintained}
    declarations = {v.name: v.shape() for v in maintained}
    now_ms = int(time.time() * 1000)
    if marker is None:
        clear_earlier_rows(settings)
        # What an uncommitted checkpoint planned (offsets, state) was made with earlier settings: gone
        # before the new marker, so Spark starts from the earliest offset under these. (Killed in
        # between, the next start finds the same: no commit, so a fresh start again.)
        checkpoints.remove_checkpoint_dir(settings)
        checkpoints.write_marker(settings, now_ms, maintained_since(None, names, now_ms), definitions, declarations)
        return maintained
    # A marker from before start times were recorded was written at the first start; one from before
    # views were recorded was written when every view declared now was (they could not change).
    started = marker.started_ms if marker.started_ms is not None else checkpoints.file_written_ms(settings)
    previous = marker.views if marker.views is not None else dict.fromkeys(names, 0)
    if set(names) - set(previous):
        # A view added is maintained from after every record the stopped speed layer counted without
        # it: after the latest Kafka holds (the brokers' clock), when that is ahead of this host's.
        now_ms = max(now_ms, (kafka.latest_ingest_ms(settings) or -1) + 1)
    views = maintained_since(previous, names, now_ms)
    if (
        views != marker.views
        or started != marker.started_ms
        or definitions != marker.definitions
        or declarations != marker.declarations
        or marker.dedupe_window_s is None  # an older marker: recorded from now on
    ):
        added = sorted(set(views) - set(previous))
        removed = sorted(set(previous) - set(views))
        if added or removed:
            log.info("views added since the last start: %s; removed: %s", added or "none", removed or "none")
        checkpoints.write_marker(settings, started, views, definitions, declarations)
    return maintained


def clear_earlier_rows(settings: Settings) -> None:
    """A fresh checkpoint writes every realtime row again from the earliest Kafka offset: rows an
    earlier checkpoint wrote go first. Left, they were counted beside the new ones, twice or under
    the old ingest buckets (the documented change of ingest_bucket_s removes the checkpoint). A
    replay's rows answer beside the view's own, so a fresh start waits until none is recorded."""
    from stores import realtime_schema, replays

    claims, overlays = replays.read_replays(settings)
    if claims or overlays:
        raise SystemExit(
            f"the speed layer starts from a fresh checkpoint, which writes every realtime row again, but replays of "
            f"{sorted({*claims, *overlays})} are recorded: cancel them (`lambdactl replay --view V --cancel`) or "
            "let a batch run absorb them (`lambdactl batch`, then `lambdactl clean-realtime`), then start again"
        )
    cleared = realtime_schema.clear_rows(settings)
    if cleared:
        log.warning(
            "fresh checkpoint: emptied the realtime tables %s (rows of an earlier checkpoint); every row is written "
            "again from the earliest offset Kafka holds",
            cleared,
        )


# The progress file's key for late drops not recorded on HDFS yet: [below_ms, rows], or None.
PENDING = "late_drops_pending"


def late_drops_recorder(settings: Settings):
    """A progress hook: rows a batch dropped as later than the watermark are recorded beside the
    checkpoint (stores.checkpoints.record_late_drops), where the serving layer reads them and says
    the answers they are missing from are not complete. Drops it could not record yet (HDFS away)
    are kept in the progress file beside the driver (PENDING) for the next start, should the job
    stop first (record_pending_late_drops). Each record moves the realtime store's late-drops mark,
    so the serving layer reads the record at once (stores.registry.late_drops_marks)."""
    from stores import checkpoints
    from stores.registry import late_drops_marks

    pending = [0, 0]  # (below_ms, rows) not recorded yet: tried again at every batch until it is
    marks = late_drops_marks(settings)

    def record(progress) -> dict:
        dropped = dropped_by_watermark(progress)
        below = watermark_ms(progress) if dropped else None
        if dropped and below is not None:
            pending[0], pending[1] = max(pending[0], below), pending[1] + dropped
        if not pending[1]:
            return {PENDING: None}
        try:
            checkpoints.record_late_drops(settings, pending[0], pending[1])
            pending[0] = pending[1] = 0
        except Exception as exc:  # noqa: BLE001 - HDFS away: the next batch tries again
            log.warning("could not record %d rows dropped as late: %s: %s", pending[1], type(exc).__name__, exc)
            return {PENDING: list(pending)}
        if marks is not None:
            try:
                marks.mark()
            except Exception as exc:  # noqa: BLE001 - the serving layer reads the record within a minute anyway
                log.warning("could not mark the late drops recorded: %s: %s", type(exc).__name__, exc)
        return {PENDING: None}

    return record


def _mark_late_drops(settings: Settings) -> None:
    """Move the late-drops mark once; never raises (the drops are recorded already: a failure here
    must not leave them pending, to be recorded again at the next start)."""
    from stores.registry import late_drops_marks

    marks = None
    try:
        marks = late_drops_marks(settings)
        if marks is not None:
            marks.mark()
    except Exception as exc:  # noqa: BLE001 - the serving layer reads the record within a minute anyway
        log.warning("could not mark the late drops recorded: %s: %s", type(exc).__name__, exc)
    finally:
        if marks is not None:
            marks.close()


def record_pending_late_drops(settings: Settings) -> None:
    """Record the late drops the last run kept in its progress file but could not record on HDFS
    before it stopped. Raises what HDFS raises (the start fails, and the next one tries again: the
    file is only written anew once the query starts)."""
    import json

    from definitions.files import replace_text
    from stores import checkpoints
    from stores.progress import progress_path

    path = progress_path(settings, JOB)
    try:
        doc = json.loads(path.read_text())
        kept = doc.get(PENDING)
    except (OSError, ValueError, AttributeError):
        return  # no file (a first start on this machine), or one that is no record
    try:
        below_ms, rows = (int(value) for value in kept)
    except (TypeError, ValueError):
        return  # None: nothing pending
    if rows > 0:
        checkpoints.record_late_drops(settings, below_ms, rows)
        log.warning("recorded %d rows the last run dropped as late but could not record before it stopped", rows)
        _mark_late_drops(settings)
    # Recorded: not again, should this start stop before its progress file is written anew.
    replace_text(path, json.dumps({**doc, PENDING: None}))


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
            "spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        },
    )
    progress = ProgressFile(
        settings,
        JOB,
        hooks={QUERY: late_drops_recorder(settings)},
        extra={"ingest_bucket_s": settings.ingest_bucket_s, "dedupe_window_s": settings.speed.dedupe_window_s},
        publish=HdfsPublisher(settings, JOB),
    )
    spark.streams.addListener(progress.listener())
    stopping = stop_on_signal("the speed layer")
    # The store is reached (and its schema made) before the first batch: a missing store or adapter
    # stops the job here, with its reason, rather than in a task.
    realtime_writer(settings).close()
    writer = BatchWriter(settings, maintained)

    def start(strict: bool) -> tuple:
        return (
            aggregated_cells(spark, settings, maintained, strict)
            .writeStream.queryName(QUERY)
            .outputMode("update")
            .foreachBatch(writer)
            .option("checkpointLocation", f"{settings.hdfs.url}{settings.speed.checkpoint_dir}")
            .trigger(processingTime=trigger_interval(settings.speed.trigger_s))
            .start(),
        )

    queries = start(not past)
    log.info(
        "speed layer running: %s → Cassandra %s (trigger %ss, de-duplication window %ss, ingest bucket %ss)",
        settings.kafka.events_topic,
        settings.cassandra.keyspace,
        settings.speed.trigger_s,
        settings.speed.dedupe_window_s,
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
    return run(settings)


if __name__ == "__main__":
    sys.exit(main())
