"""The settings of the layers' jobs (sections `archiver`, `batch`, `speed` and `events` of
definitions.settings.Settings)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from definitions.section import HdfsPath
from definitions.section import Section as _Section
from definitions.spark_settings import SparkMemory, no_other_zone

CASSANDRA_MAX_TTL_S = 630_720_000  # 20 years: Cassandra refuses a longer default_time_to_live
# The UTF-8 bytes of one view key: HBase's row key takes 32,767 (with the parts' lengths and the
# bucket), Cassandra's partition key 65,535 (the key as a JSON array, each byte at most 2 there).
MAX_KEY_BYTES = 32_000


class ArchiverSettings(_Section):
    """The Kafka → HDFS master dataset job. Paths are on the HDFS of `hdfs`."""

    master_path: HdfsPath = "/lambda/master/events"
    completeness_path: HdfsPath = "/lambda/master/completeness"
    checkpoint_dir: HdfsPath = "/lambda/checkpoints/archiver"
    # Between a millisecond and an hour: Spark takes the trigger as whole milliseconds
    # (definitions.spark.trigger_interval).
    trigger_s: float = Field(10.0, ge=0.001, le=3_600)
    # How often each partition of `events` gets a tick record, so ingest-time completeness
    # advances on idle partitions too. Unset: a sixth of an ingest bucket, within 5–60 s (each tick
    # wakes both streaming jobs for a micro-batch; cutoffs move once per ingest bucket).
    tick_interval_s: float | None = Field(None, ge=1, le=3_600)
    max_offsets_per_trigger: int = Field(500_000, ge=1, le=100_000_000)
    driver_memory: SparkMemory = "768m"
    keep_markers: int = Field(20, ge=1, le=100_000)
    # The file sink's log (`_spark_metadata`) lists every file the archiver wrote, ~35,000 a day, and
    # Spark rewrites it whole every 10 batches. It forgets files older than this at those rewrites:
    # compaction (`lambdactl compact-master`, daily) normally takes their hours long before. Until it
    # does, an hour holding files it may have forgotten is read from its folder (stores.master_live).
    sink_log_retention_h: int = Field(72, ge=24, le=10 * 8_760)
    health_timeout_s: float = Field(240, gt=0, le=3_600)


class BatchSettings(_Section):
    """The batch layer's recomputation into versioned HBase tables."""

    # A run's Spark driver (all of Spark in local mode). It exists only while a run does; its cache
    # holds the run's de-duplicated events. 10M master records end to end on 2 cores with the
    # stack up (bench/batch_end_to_end.py): 188 s at 1g, 168 s at 3g (both with ParallelGC).
    driver_memory: SparkMemory = "3g"
    # The run's driver JVM options, instead of spark.jvm_options (made for long-lived streaming
    # JVMs): a throughput collector for a job that ends. 10M records at 1g: 200–205 s with the
    # streaming G1 options, 188 s with these. The time zone option is always added.
    jvm_options: str = "-XX:+UseParallelGC"
    # How often the batch views are recomputed (the Airflow schedule).
    interval_s: int = Field(3_600, ge=60, le=366 * 86_400)
    # The DAG's limits: each task's execution_timeout (a recompute of a large master dataset takes
    # hours), and how long its sensor waits for the archiver's completeness before it gives up.
    task_timeout_s: int = Field(7_200, ge=300, le=7 * 86_400)
    completeness_wait_s: int = Field(3_600, ge=60, le=7 * 86_400)
    # Per view, versions that served, kept (the serving one included) for rollback; older tables
    # are dropped — never a table the pointer names. At least 2: an answer that read the pointer
    # just before a swap still reads the previous table (longer with api.pointer_cache_s).
    keep_versions: int = Field(3, ge=2, le=100)
    # Retention leaves the tables of a run in flight (writing, or verified and not swapped yet)
    # alone for this long after it started, verified or last beat (a writing run records a heartbeat
    # at least every minute); a killed run's tables go at the first swap after it. At least 10 min:
    # a verified run swaps only while a minute of its grace is left (batch_layer.swap.SWAP_MARGIN_MS),
    # so under one no run would ever swap.
    retention_grace_s: int = Field(3_600, ge=600, le=30 * 86_400)
    put_batch_size: int = Field(2_000, ge=1, le=1_000_000)
    # Verification scans a written table back in this many row ranges at once (one Thrift
    # connection each), split at row keys sampled from the computation.
    verify_threads: int = Field(4, ge=1, le=32)
    # How computed views reach their tables: "bulk", HFiles written by the Spark tasks into the state
    # directory and loaded whole by HBase (stores/batch_bulk_load: the driver, the executors and HBase
    # must share that directory; 1.6–2.9× the puts' rate measured); "puts", batched puts through
    # HBase Thrift from the Spark tasks (put_batch_size each); "auto", bulk when HBase is a service of
    # this machine's stack and Spark runs here too (local mode or the local cluster), else puts
    # (stores.batch_bulk_load.chosen_load).
    load: Literal["auto", "puts", "bulk"] = "auto"
    # The realtime clean-up deletes rows a swap absorbed only this long after the swap. An answer
    # that took longer than this after its pointer read (`api.pointer_cache_s` old at most) is
    # computed again on a fresh pointer, and labelled incomplete if that is slow too
    # (serving_layer.service): longer than queries take keeps them from being computed twice.
    cleanup_settle_s: float = Field(20.0, ge=0, le=3_600)
    # Accuracy reports kept (one per batch run; the newest, here and on HDFS).
    keep_reports: int = Field(500, ge=1, le=1_000_000)
    # Where reports are copied on HDFS: a directory of this stack's own (retention there removes any
    # report beyond the newest keep_reports, so two stacks sharing an HDFS need one each).
    reports_path: HdfsPath = "/lambda/reports"
    # Batch run records kept in the meta table: the newest this many, and any older one that still
    # matters (stores/run_records.py); retention deletes the others, so swaps, verifications and
    # reports, which read them all, do not slow down as runs accumulate. A report of an older run's
    # window can no longer be built (its stored report stays).
    keep_runs: int = Field(500, ge=20, le=1_000_000)

    @field_validator("jvm_options")
    @classmethod
    def _jvm_zone_stays_utc(cls, options: str) -> str:
        return no_other_zone("batch.jvm_options", options)


class SpeedSettings(_Section):
    """The Kafka → Cassandra realtime views job. The checkpoint path is on the HDFS of `hdfs`."""

    checkpoint_dir: HdfsPath = "/lambda/checkpoints/speed"
    # A micro-batch starts this long after the previous one started, or as soon as it ends if it
    # took longer. An event waits for the next trigger, then for its micro-batch (~0.4 s idle): at
    # 0.25 s the end-to-end p50 was 0.55-0.65 s, at 1 s 1.11-1.16 s (README, Benchmarks). Nothing
    # more while nothing arrives (a batch runs only on new records: the archiver's ticks) nor under
    # load (a batch longer than the trigger takes all that arrived meanwhile); under a steady
    # trickle, micro-batches follow each other: about a third of a core more than at 1 s.
    trigger_s: float = Field(0.25, ge=0.001, le=3_600)
    # Partitions of the speed layer's state (de-duplication and aggregation): each is a RocksDB
    # instance whose changes are committed to HDFS every micro-batch. Read when a checkpoint is
    # created; a checkpoint keeps the number it was made with.
    shuffle_partitions: int = Field(2, ge=1, le=10_000)
    # Watermark delay on ingest time: duplicates re-sent within this window are counted once
    # (Spark keeps an event_id until the watermark passes its time + this delay, so in practice
    # one to two windows, longer while no traffic moves the watermark), and aggregation state of
    # older ingest buckets is dropped.
    dedupe_window_s: int = Field(600, ge=1, le=366 * 86_400)
    # The de-duplication operator a new checkpoint's state is made by (README, speed layer): Spark's
    # dropDuplicatesWithinWatermark reads every id the window holds at each micro-batch; event-time
    # timers cost each id its insert and its expiry, and stall for minutes when the watermark jumps
    # over millions of ids at once (after a quiet spell or a catch-up). On this platform the scan
    # held more at 120 s and 600 s windows (README, Benchmarks): the default. The same rule either
    # way; of copies in one micro-batch the timers keep the first by ingest time, partition and
    # offset, the scan whichever its shuffle delivered first. A checkpoint keeps the operator it was
    # made with (its marker says which); `lambdactl reset-speed` makes a new one with this.
    dedupe_operator: Literal["first-copy-timers", "within-watermark-scan"] = "within-watermark-scan"
    # Realtime rows expire by themselves this long after they are written, so a platform whose
    # batch runs stopped does not grow without bound (the cleanup after each batch swap deletes
    # absorbed rows much sooner). Unset: derived from the batch schedule with a wide margin
    # (Settings.realtime_ttl_s). Answers that need rows older than ttl − stale_margin_s say
    # `complete: false` and why (serving_layer.staleness): never a silently short count.
    ttl_s: int | None = Field(None, ge=3_600, le=CASSANDRA_MAX_TTL_S)
    stale_margin_s: int = Field(3_600, ge=0, le=30 * 86_400)
    # gc_grace_seconds of the realtime tables: how long deletion and expiry tombstones stay before a
    # compaction may purge them (Cassandra's default is 10 days). Rows here are never read below
    # the serving cutoff, so a deletion missed by a replica is harmless; a short grace keeps reads
    # clear of tombstones.
    gc_grace_s: int = Field(3_600, ge=0, le=2**31 - 1)  # Cassandra's table option is an int
    # The most records one micro-batch reads: bounds a catch-up's batches. Input faster than the
    # batches' fixed cost lets through needs batches larger than this: at 20,000 records/s the
    # speed layer settles at ~240,000 a batch, so 200,000 held it back (20,000 records/s over 300 s,
    # bench/speed_freshness.py --native --rates 20000 --step-duration 300, test-settings stack,
    # 2026-12-06: not sustained at 200,000, every batch capped; sustained at 400,000, batches of
    # 210,000-250,000 once the step's start was caught up, 14.9 s median, no memory error).
    max_offsets_per_trigger: int = Field(400_000, ge=1, le=100_000_000)
    write_concurrency: int = Field(64, ge=1, le=4_096)
    # Realtime rows go to Cassandra in unlogged batches of rows that live on the same replicas (a
    # batch is one request, which its replicas apply locally), each batch up to this many bytes of
    # values (Cassandra warns above its batch_size_warn_threshold, 5 KiB by default). 0: every row
    # is its own request.
    write_batch_bytes: int = Field(5_120, ge=0, le=51_200)  # Cassandra refuses batches over 50 KiB by default
    # How long a micro-batch keeps retrying its Cassandra writes (a restart, a brief outage) before
    # the query fails: meanwhile the job waits and Kafka holds the records, nothing is lost.
    store_outage_s: float = Field(600, ge=0, le=7 * 86_400)
    driver_memory: SparkMemory = "768m"
    health_timeout_s: float = Field(240, gt=0, le=3_600)


class EventLimits(_Section):
    """What a record of topic `events` (or one event of POST /api/v1/events) may be. Validation
    checks these before any other work, so a hostile record costs a bounded amount. See docs/security.md."""

    # Bytes of one record's value; larger records are dead-lettered unread.
    max_record_bytes: int = Field(4_096, ge=256, le=1_000_000)
    # Nesting of JSON arrays/objects, checked by a scan before parsing (an event is a flat object: 1).
    max_nesting_depth: int = Field(4, ge=1, le=64)
    # Characters of the free-text fields (the identifiers and enumerations have fixed limits); a
    # field cannot be longer than the largest record anyway.
    max_url_chars: int = Field(2_048, ge=16, le=1_000_000)
    max_referrer_chars: int = Field(2_048, ge=16, le=1_000_000)
    max_user_id_chars: int = Field(128, ge=8, le=1_000_000)
    max_event_id_chars: int = Field(64, ge=8, le=1_000_000)
    # The event-time range accepted: not before this instant (epoch seconds; 2000-01-01T00:00:00Z;
    # at most 9999-12-31T23:59:59Z) …
    min_event_time_s: int = Field(946_684_800, ge=0, le=253_402_300_799)
    # … and at most this far after Kafka stored the record (producer clock skew).
    max_future_s: int = Field(3_600, ge=0, le=7 * 86_400)
    # Raw bytes of an invalid record kept in its dead-letter envelope (its size and SHA-256 are kept
    # too), so the envelope always fits in one Kafka record.
    max_dlq_raw_bytes: int = Field(4_096, ge=64, le=256_000)

    def worst_key_bytes(self) -> int:
        """The most bytes a view's key made of an event's fields can take: every free-text field at 4
        bytes a character, and at most one record's bytes."""
        chars = self.max_url_chars + self.max_referrer_chars + self.max_user_id_chars + self.max_event_id_chars
        return min(self.max_record_bytes, 4 * chars)

    @model_validator(mode="after")
    def _keys_fit_the_stores(self) -> EventLimits:
        """A view's key must fit HBase's row key and, JSON-quoted, Cassandra's partition key:
        otherwise one valid event fails every batch run for good."""
        chars = self.max_url_chars + self.max_referrer_chars + self.max_user_id_chars + self.max_event_id_chars
        worst = self.worst_key_bytes()
        if worst > MAX_KEY_BYTES:
            raise ValueError(
                f"events.max_record_bytes ({self.max_record_bytes}) and 4 bytes a character of events.max_url_chars, "
                f"max_referrer_chars, max_user_id_chars and max_event_id_chars ({chars} in all) both allow a view key "
                f"of {worst} bytes; the stores take at most {MAX_KEY_BYTES}: lower either"
            )
        return self
