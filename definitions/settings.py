"""The platform's one settings object.

Values come, highest priority first, from: keyword arguments, environment variables
(``LAMBDA_`` prefix, ``__`` between nested names, e.g. ``LAMBDA_KAFKA__PORT=19092``),
a TOML file (``$LAMBDA_CONFIG``, else ``lambda.toml`` in the working directory when present),
the settings persisted in the state directory by the first ``lambdactl up`` (see
definitions.settings_store; `get_settings` reads them), then the local defaults below. Every local default binds to 127.0.0.1. Unknown keys are
refused, so a typo fails at load instead of being ignored.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, PrivateAttr, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from definitions.section import ANY_ADDRESS, HdfsPath, Host, Port, PublicUrl
from definitions.section import Section as _Section
from definitions.stack_settings import AIRFLOW_COMPANIONS, LoggingSettings, StackSettings
from definitions.store_connections import LOCAL_HOST, CassandraSettings, HBaseSettings, HdfsSettings, KafkaSettings
from definitions.store_settings import StoresSettings

__all__ = ["AIRFLOW_COMPANIONS", "LoggingSettings", "Settings", "StackSettings", "get_settings"]

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TOKEN = "dev-token-change-me"
MIN_TOKEN_CHARS = 16
# The UTF-8 bytes of one view key: HBase's row key takes 32,767 (with the parts' lengths and the
# bucket), Cassandra's partition key 65,535 (the key as a JSON array, each byte at most 2 there).
MAX_KEY_BYTES = 32_000
BEARER_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")  # RFC 6750's b64token
DEFAULT_AIRFLOW_PASSWORD = "admin"
CASSANDRA_MAX_TTL_S = 630_720_000  # 20 years: Cassandra refuses a longer default_time_to_live
JVM_SIZE = r"^\d+[kKmMgGtT]$"  # a JVM heap size: 768m, 3g (Spark's launcher refuses anything else at start)


class SparkClusterSettings(_Section):
    """A Spark standalone cluster that `lambdactl up` runs as local processes (`spark-master`,
    `spark-worker-1` …, from the pinned pyspark's own jars). `workers` 0 (the default): no cluster,
    every job runs in `spark.master`. More than 0: every job (archiver, speed layer, batch,
    reports) runs as an application of this cluster, its work in the workers' executors."""

    workers: int = Field(0, ge=0, le=4)
    host: Host = LOCAL_HOST
    port: Port = 7077
    ui_port: Port = 8090  # the master's web UI and JSON (/json/); workers use the ports after it
    # Task slots and memory each worker offers. Slots may exceed the machine's cores: the archiver and
    # the speed layer hold theirs all the time, and a batch run, a report and a manual run beside a
    # DAG run each need their own (an application that finds none waits).
    worker_cores: int = Field(12, ge=1, le=1_024)
    worker_memory_mb: int = Field(3_072, ge=512, le=2**20)
    daemon_heap_mb: int = Field(256, ge=64, le=65_536)
    # What each application takes of the cluster: at most this many task slots, and executors of
    # this much memory.
    app_cores: int = Field(2, ge=1, le=1_024)
    executor_memory: str = "768m"
    health_timeout_s: float = Field(60, gt=0, le=3_600)

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @model_validator(mode="after")
    def _executors_fit_the_workers(self) -> SparkClusterSettings:
        if self.ui_port + self.workers > 65_535:
            raise ValueError(
                f"spark.cluster.ui_port {self.ui_port}: its {self.workers} workers' web UIs take the ports after it, "
                "past 65535"
            )
        match = re.fullmatch(r"(\d+)([kmgt])", self.executor_memory.strip().lower())
        if not match:
            raise ValueError(f"spark.cluster.executor_memory: {self.executor_memory!r} is not like 768m or 2g")
        mb = int(match.group(1)) * {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2}[match.group(2)]
        if self.workers and mb > self.worker_memory_mb:
            raise ValueError(
                f"spark.cluster.executor_memory {self.executor_memory} exceeds what a worker offers "
                f"(spark.cluster.worker_memory_mb={self.worker_memory_mb}): no application would get an executor"
            )
        return self


UTC_NAMES = ("UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z")


def _no_other_zone(name: str, jvm_options: str) -> str:
    """JVM options that set no time zone but UTC (definitions.spark adds UTC to every JVM's)."""
    zones = re.findall(r"-Duser\.timezone=(\S*)", jvm_options)
    if any(z not in UTC_NAMES for z in zones):
        raise ValueError(f"{name} must not set -Duser.timezone to another zone than UTC: the time model is UTC")
    return jvm_options


class SparkSettings(_Section):
    master: str = "local[*]"
    # The Python interpreter of the executors' Python workers. Empty: the driver's own (right for
    # local mode and for the local cluster); set it to the interpreter path on a real cluster's nodes.
    python: str = ""
    cluster: SparkClusterSettings = SparkClusterSettings()
    driver_memory: str = Field("1g", pattern=JVM_SIZE)
    shuffle_partitions: int = Field(4, ge=1, le=10_000)
    ui_enabled: bool = False
    # JVM options of every driver (and executor): G1 returns heap it no longer needs to the
    # system after 30 s without a collection, so an idle streaming job holds what it uses, not
    # its -Xmx. The time zone option is always added.
    jvm_options: str = "-XX:+UseG1GC -XX:G1PeriodicGCInterval=30000 -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30"
    # Extra `spark.*` options passed as-is to every session.
    conf: dict[str, str] = {}

    @field_validator("conf")
    @classmethod
    def _time_stays_utc(cls, conf: dict[str, str]) -> dict[str, str]:
        """Every session reads and writes time in UTC: the archiver's ingest_date and ingest_hour
        partitions, the batch's pruning by the cutoff's date, the reports' windows. Another zone
        here put a UTC day's last hours in the next day's partition, which a batch cutoff on that
        day left out while the clean-up deleted their realtime rows."""
        zone = conf.get("spark.sql.session.timeZone")
        if zone is not None and zone not in UTC_NAMES:
            raise ValueError(f"spark.sql.session.timeZone must stay UTC (got {zone!r}): the time model is UTC")
        for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
            _no_other_zone(key, conf.get(key, ""))
        return conf

    @field_validator("jvm_options")
    @classmethod
    def _jvm_zone_stays_utc(cls, options: str) -> str:
        return _no_other_zone("spark.jvm_options", options)


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
    driver_memory: str = Field("768m", pattern=JVM_SIZE)
    keep_markers: int = Field(20, ge=1, le=100_000)
    health_timeout_s: float = Field(240, gt=0, le=3_600)


class BatchSettings(_Section):
    """The batch layer's recomputation into versioned HBase tables."""

    # A run's Spark driver (all of Spark in local mode). It exists only while a run does; its cache
    # holds the run's de-duplicated events. 10M master records end to end on 2 cores with the
    # stack up (bench/batch_end_to_end.py): 188 s at 1g, 168 s at 3g (both with ParallelGC).
    driver_memory: str = Field("3g", pattern=JVM_SIZE)
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
    # The realtime clean-up deletes rows a swap absorbed only this long after the swap: longer than
    # the API reuses a pointer (`api.pointer_cache_s`) plus the longest query, so no answer computed
    # from the previous pointer misses them.
    cleanup_settle_s: float = Field(20.0, ge=0, le=3_600)
    # Accuracy reports kept (one per batch run; the newest, here and on HDFS).
    keep_reports: int = Field(500, ge=1, le=1_000_000)
    # Batch run records kept in the meta table: the newest this many, and any older one that still
    # matters (stores/run_records.py); retention deletes the others, so swaps, verifications and
    # reports, which read them all, do not slow down as runs accumulate. A report of an older run's
    # window can no longer be built (its stored report stays).
    keep_runs: int = Field(500, ge=20, le=1_000_000)

    @field_validator("jvm_options")
    @classmethod
    def _jvm_zone_stays_utc(cls, options: str) -> str:
        return _no_other_zone("batch.jvm_options", options)


class SpeedSettings(_Section):
    """The Kafka → Cassandra realtime views job. The checkpoint path is on the HDFS of `hdfs`."""

    checkpoint_dir: HdfsPath = "/lambda/checkpoints/speed"
    # A micro-batch starts this long after the previous one started, or as soon as it ends if it
    # took longer: a short trigger costs nothing while nothing arrives (a batch runs only on new
    # records) and shortens the wait of a new event.
    trigger_s: float = Field(1.0, ge=0.001, le=3_600)
    # Partitions of the speed layer's state (de-duplication and aggregation): each is a RocksDB
    # instance whose changes are committed to HDFS every micro-batch. Read when a checkpoint is
    # created; a checkpoint keeps the number it was made with.
    shuffle_partitions: int = Field(2, ge=1, le=10_000)
    # Watermark delay on ingest time: duplicates re-sent within this window are counted once
    # (Spark keeps an event_id until the watermark passes its time + this delay, so in practice
    # one to two windows, longer while no traffic moves the watermark), and aggregation state of
    # older ingest buckets is dropped.
    dedupe_window_s: int = Field(600, ge=1, le=366 * 86_400)
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
    max_offsets_per_trigger: int = Field(200_000, ge=1, le=100_000_000)
    write_concurrency: int = Field(64, ge=1, le=4_096)
    # Realtime rows go to Cassandra in unlogged batches of rows that live on the same replicas (a
    # batch is one request, which its replicas apply locally), each batch up to this many bytes of
    # values (Cassandra warns above its batch_size_warn_threshold, 5 KiB by default). 0: every row
    # is its own request.
    write_batch_bytes: int = Field(5_120, ge=0, le=51_200)  # Cassandra refuses batches over 50 KiB by default
    # How long a micro-batch keeps retrying its Cassandra writes (a restart, a brief outage) before
    # the query fails: meanwhile the job waits and Kafka holds the records, nothing is lost.
    store_outage_s: float = Field(600, ge=0, le=7 * 86_400)
    driver_memory: str = Field("768m", pattern=JVM_SIZE)
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

    @model_validator(mode="after")
    def _keys_fit_the_stores(self) -> EventLimits:
        """A view's key is made of an event's fields: at most every free-text field at 4 bytes a
        character, and at most one record's bytes. It must fit HBase's row key and, JSON-quoted,
        Cassandra's partition key: otherwise one valid event fails every batch run for good."""
        chars = self.max_url_chars + self.max_referrer_chars + self.max_user_id_chars + self.max_event_id_chars
        worst = min(self.max_record_bytes, 4 * chars)
        if worst > MAX_KEY_BYTES:
            raise ValueError(
                f"events.max_record_bytes ({self.max_record_bytes}) and 4 bytes a character of events.max_url_chars, "
                f"max_referrer_chars, max_user_id_chars and max_event_id_chars ({chars} in all) both allow a view key "
                f"of {worst} bytes; the stores take at most {MAX_KEY_BYTES}: lower either"
            )
        return self


class ApiSettings(_Section):
    host: Host = LOCAL_HOST
    port: Port = 8000
    # Where a browser reaches the API (the Airflow UI's report links): behind a proxy, or from
    # outside a container whose host name only other containers know; empty: host and port.
    public_url: PublicUrl = ""
    # Bearer token for POST /api/v1/events and admin routes. The service refuses to start with
    # the default outside development.
    token: SecretStr = SecretStr(DEFAULT_TOKEN)
    # Bearer token for the admin routes (trigger a recomputation, reload the views) only, so that
    # event producers cannot; empty: the admin routes take `token` too.
    admin_token: SecretStr = SecretStr("")
    cors_origins: list[str] = []
    # Host names (or addresses) a request's Host header may name; "*": any. Empty: this machine's
    # loopback names, `host` and `public_url`'s host, or any when `host` is every address
    # (0.0.0.0). A web page whose name its owner points at 127.0.0.1 (DNS rebinding) reads nothing.
    allowed_hosts: list[Annotated[str, Field(pattern=r"^(\*|[A-Za-z0-9._:%\[\]-]{1,253})$")]] = Field(
        [], max_length=100
    )
    max_buckets: int = Field(2_000, ge=1, le=1_000_000)

    @field_validator("token", "admin_token")
    @classmethod
    def _token_is_a_bearer_token(cls, token: SecretStr, info: ValidationInfo) -> SecretStr:
        """An empty token would let a request without credentials through; one a client cannot send
        in an Authorization header would lock every client out."""
        value = token.get_secret_value()
        if info.field_name == "admin_token" and not value:
            return token
        if len(value) < MIN_TOKEN_CHARS or not BEARER_TOKEN.fullmatch(value):
            raise ValueError(
                f"api.{info.field_name} must be at least {MIN_TOKEN_CHARS} characters of A-Z a-z 0-9 - . _ ~ + / "
                "(then = signs), as a bearer token is; make one with "
                "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )
        if info.field_name == "admin_token" and value == info.data.get("token", SecretStr("")).get_secret_value():
            raise ValueError("api.admin_token must differ from api.token (leave it empty to use api.token)")
        return token

    def admin_secret(self) -> str:
        """The token the admin routes take."""
        return self.admin_token.get_secret_value() or self.token.get_secret_value()

    def host_names(self) -> frozenset[str] | None:
        """The host names (lower case, an IPv6 address without brackets) a request's Host header may
        name (allowed_hosts); None: any."""
        if "*" in self.allowed_hosts:
            return None
        if not self.allowed_hosts and self.host in ANY_ADDRESS:
            return None
        public = urlsplit(self.public_url).hostname if self.public_url else None
        # `host` itself too, every address included: the platform's own clients (lambdactl, the
        # health probes) ask http://<api.host>:<api.port>; no web page can name it for another site.
        named = [*self.allowed_hosts, self.host, *([public] if public else [])]
        return frozenset({"localhost", "127.0.0.1", "::1", *(n.strip("[]").lower() for n in named)})

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts_without_ports(cls, hosts: list[str]) -> list[str]:
        for host in hosts:
            if host.count(":") == 1:  # an IPv6 address has more
                raise ValueError(
                    f"api.allowed_hosts: give {host!r} without its port (a Host header's port is not compared)"
                )
        return hosts

    max_events_per_request: int = Field(1_000, ge=1, le=1_000_000)
    # Bytes of a request body; larger bodies are answered 413 before they are read.
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1_024, le=2**30)
    # Queries may ask about event times from this instant (epoch seconds; 2000-01-01T00:00:00Z) …
    earliest_query_time_s: int = Field(946_684_800, ge=0, le=253_402_300_799)
    # … up to this far ahead of now.
    max_query_ahead_s: int = Field(7 * 86_400, ge=0, le=100 * 366 * 86_400)  # now + this: a year before 9999
    # View queries served at once; a query waits up to `query_queue_s` for a slot, then gets 429.
    max_concurrent_queries: int = Field(8, ge=1, le=1_024)
    query_queue_s: float = Field(2.0, ge=0, le=600)
    hbase_pool_size: int = Field(8, ge=1, le=1_024)
    # How long a query waits for a free pooled HBase connection before HBase counts as unavailable.
    hbase_pool_wait_s: float = Field(5.0, gt=0, le=600)
    health_timeout_s: float = Field(60, gt=0, le=3_600)
    # How long a read of the pointer is reused (0: read per query). The realtime clean-up waits
    # `batch.cleanup_settle_s` after a swap, so an answer from a pointer this old stays exact.
    pointer_cache_s: float = Field(1.0, ge=0, le=10)
    # Memory for what queries read from batch tables (they never change once served); 0: none.
    batch_cache_mib: int = Field(64, ge=0, le=65_536)
    # Memory for what queries read from the realtime store, kept until the store is written again
    # (serving_layer.speed_cache); 0: none.
    speed_cache_mib: int = Field(32, ge=0, le=65_536)
    # The most data one read of a query may hold (about what Python holds: 200 bytes a row, its key
    # twice, its sketch): a top-N reads every key its window saw (realtime rows since the cutoff; the
    # batch keys of its buckets), a series its sketches; a query beside a switched replay reads its
    # realtime rows twice. A window holding more is a 422 asking for a narrower one, not a worker's
    # memory.
    max_read_mib: int = Field(64, ge=1, le=65_536)
    # How often, at most, the API asks the realtime store whether it was written since (one small
    # read): an answer shows a realtime write at most this long after it ended.
    realtime_check_s: float = Field(0.05, ge=0.005, le=1)
    # Processes answering on the port (uvicorn's workers, sharing its socket). A view reload reaches
    # every one (api/worker_sync.py); the query slots and the caches above are per process.
    workers: int = Field(2, ge=1, le=16)


class AirflowSettings(_Section):
    """Airflow 3, in its own virtualenv, scheduling and triggering the batch recomputation."""

    host: Host = LOCAL_HOST
    port: Port = 8080
    # Where a browser reaches Airflow's UI (the run's address the recompute route answers); empty:
    # host and port.
    public_url: PublicUrl = ""
    venv: Path = REPO_ROOT / ".venv-airflow"
    # AIRFLOW_HOME; empty: a directory in the state dir.
    home: str = ""
    # Any SQLAlchemy URL; empty: SQLite in AIRFLOW_HOME.
    database_url: SecretStr = SecretStr("")
    # Airflow reads its users as "name:role,name:role": no comma, colon or blank in the name.
    admin_user: str = Field("admin", pattern=r"^[^,:\s]{1,256}$")
    admin_password: SecretStr = SecretStr(DEFAULT_AIRFLOW_PASSWORD)
    # Task slots of the LocalExecutor (one worker process of ~130 MB each): the DAG runs one task at a
    # time, one run at a time (max_active_runs=1).
    parallelism: int = Field(1, ge=1, le=256)
    # The id dags/lambda_batch_recompute.py declares: the API triggers and reads its runs by it.
    dag_id: Literal["lambda_batch_recompute"] = "lambda_batch_recompute"
    health_timeout_s: float = Field(300, gt=0, le=3_600)
    # A new install's DAG is active: it runs every batch.interval_s. True creates it paused (the
    # Makefile's tests: no scheduled run in their way). Either way a pause set later is kept.
    paused_at_creation: bool = False
    # Task logs, DAG-processor logs and run records older than this go (`lambdactl housekeeping`,
    # daily by the lambda_housekeeping DAG).
    keep_history_days: int = Field(30, ge=1, le=3_650)

    @field_validator("home", "database_url", "admin_user")
    @classmethod
    def _not_expanded_by_airflow(cls, value: str | SecretStr, info: ValidationInfo) -> str | SecretStr:
        """Airflow expands `$NAME` and a leading `~` in every value it reads from its environment
        (AIRFLOW__…, AIRFLOW_HOME): a password with `$` in the database URL, or a home named with
        one, became another value there than here. The home is absolute: every process (the
        platform's and Airflow's, each started from its own directory) must find the same one."""
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if any(ord(c) < 32 or ord(c) == 127 for c in text):
            raise ValueError("must not contain a line break or another control character")
        if "$" in text:
            hint = " (in a URL, write it percent-encoded: %24)" if info.field_name == "database_url" else ""
            raise ValueError(f"must not contain $: Airflow expands $NAME in the values it reads{hint}")
        if text.startswith("~"):
            raise ValueError("must not start with ~: Airflow expands it to a home directory")
        if info.field_name == "home" and text and not os.path.isabs(text):
            raise ValueError("must be an absolute path (empty: a directory in the state directory)")
        return value


class ViewSettings(_Section):
    # Modules that declare more views (a module-level `VIEWS` list of definitions.views.View),
    # added to the built-in ones.
    modules: list[str] = []
    # Directories searched for those modules first (absolute paths); empty: installed packages only.
    paths: list[Path] = []

    @field_validator("paths")
    @classmethod
    def _absolute(cls, paths: list[Path]) -> list[Path]:
        """Each process runs in a folder of its own: a relative folder named other modules in each."""
        relative = [str(p) for p in paths if not p.is_absolute()]
        if relative:
            raise ValueError(f"must be absolute paths: {relative}")
        return paths


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="LAMBDA_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        hide_input_in_errors=True,
        allow_inf_nan=False,
    )
    # What this process was given explicitly (environment, TOML file), when loaded over persisted
    # settings (definitions.settings_store.load): what `persist` writes back, and nothing else.
    _given: dict[str, Any] | None = PrivateAttr(default=None)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Settings:
        """A copy; the sections `update` replaces count as given explicitly (what `persist` writes)."""
        copy = super().model_copy(update=update, deep=deep)
        if update and self._given is not None:
            from definitions.settings_store import _plain

            changed = {name: getattr(copy, name) for name in update}
            plain = {name: _plain(v.model_dump() if isinstance(v, BaseModel) else v) for name, v in changed.items()}
            copy._given = {**self._given, **plain}
        return copy

    # "development" accepts the development token and Airflow password; any other value refuses to
    # start the API and Airflow with them. The Makefile (demo, tests) says "development" explicitly.
    environment: str = "production"
    # Data, logs and pid files of every local service live under this one directory.
    state_dir: Path = REPO_ROOT / ".lambda" / "state"
    # Where `make setup` puts the jars resolved by infra/maven.
    jars_dir: Path = REPO_ROOT / ".lambda" / "jars"

    @field_validator("state_dir", "jars_dir")
    @classmethod
    def _no_control_characters(cls, path: Path, info: ValidationInfo) -> Path:
        """The paths are written into the stores' configuration files: a line break would add lines;
        `#` starts a comment in Cassandra's YAML (its five data directories became one, outside the
        state directory), `,` separates Kafka's log directories, `:` is no part of a Hadoop path,
        ` ;` starts a comment in supervisord's configuration, which strips quotes around values; a
        backslash is an escape in Java properties (Kafka's log.dirs), `${…}` is expanded by Hadoop
        and log4j, `%` is a logback pattern, `?` ends the file URI of Cassandra's configuration (these
        last four in the state directory only: the stores' files are there)."""
        if any(ord(c) < 32 or ord(c) == 127 for c in str(path)):
            raise ValueError("must not contain a line break or another control character")
        refused = "#,:;'\"\\%$?" if info.field_name == "state_dir" else "#,:;'\""
        odd = sorted({c for c in str(path) if c in refused})
        if odd:
            raise ValueError(
                f"must not contain {' or '.join(repr(c) for c in odd)}: the stores' configurations split or "
                "expand there (Java properties read a backslash as an escape, Hadoop and log4j expand ${…}, "
                "supervisord strips quotes, logback reads % as a pattern, a file URI ends at ?)"
            )
        return path

    ingest_bucket_s: int = Field(3600, ge=1, le=366 * 86_400)

    kafka: KafkaSettings = KafkaSettings()
    hdfs: HdfsSettings = HdfsSettings()
    hbase: HBaseSettings = HBaseSettings()
    cassandra: CassandraSettings = CassandraSettings()
    spark: SparkSettings = SparkSettings()
    archiver: ArchiverSettings = ArchiverSettings()
    batch: BatchSettings = BatchSettings()
    speed: SpeedSettings = SpeedSettings()
    events: EventLimits = EventLimits()
    api: ApiSettings = ApiSettings()
    airflow: AirflowSettings = AirflowSettings()
    views: ViewSettings = ViewSettings()
    stack: StackSettings = StackSettings()
    logging: LoggingSettings = LoggingSettings()
    # Which adapter plays each store role: a built-in short name or `package.module.ClassName`.
    stores: StoresSettings = StoresSettings()

    @property
    def tick_interval_s(self) -> float:
        """How often the archiver's ticker sends a tick to each partition of `events`."""
        explicit = self.archiver.tick_interval_s
        return explicit if explicit is not None else min(60.0, max(5.0, self.ingest_bucket_s / 6))

    @property
    def realtime_ttl_s(self) -> int:
        """How long realtime rows live: speed.ttl_s, or by default three days and at least ten batch
        intervals, so many scheduled runs in a row can fail before a row could expire unabsorbed."""
        return self.speed.ttl_s if self.speed.ttl_s is not None else max(3 * 86_400, 10 * self.batch.interval_s)

    @model_validator(mode="after")
    def _realtime_rows_outlive_batches(self) -> Settings:
        floor = 2 * self.batch.interval_s + self.speed.stale_margin_s + 3_600
        if self.realtime_ttl_s < floor:
            raise ValueError(
                f"speed.ttl_s ({self.realtime_ttl_s}s) must be at least two batch intervals plus "
                f"speed.stale_margin_s plus an hour ({floor}s): realtime rows must outlive any "
                "plausible batch delay"
            )
        if self.realtime_ttl_s > CASSANDRA_MAX_TTL_S:
            raise ValueError(
                f"the realtime rows' TTL ({self.realtime_ttl_s}s, ten batch.interval_s when speed.ttl_s is unset) "
                f"must be at most {CASSANDRA_MAX_TTL_S}s (Cassandra's limit, 20 years): the speed layer could not "
                "create its tables"
            )
        if self.ingest_bucket_s > self.batch.interval_s:
            raise ValueError("ingest_bucket_s must not exceed batch.interval_s")
        if self.batch.cleanup_settle_s < self.api.pointer_cache_s + 5:
            raise ValueError(
                f"batch.cleanup_settle_s ({self.batch.cleanup_settle_s:g}s) must exceed api.pointer_cache_s "
                f"({self.api.pointer_cache_s:g}s) by 5s at least: the clean-up would delete realtime rows an "
                "answer from the previous pointer still needs"
            )
        if self.stack.stuck_after_s < 3 * self.tick_interval_s:
            raise ValueError(
                f"stack.stuck_after_s ({self.stack.stuck_after_s:g}s) must be at least three tick intervals "
                f"({self.tick_interval_s:g}s each): an idle streaming job would look stuck"
            )
        slowest = max(self.archiver.trigger_s, self.speed.trigger_s)
        if self.stack.stuck_after_s < 3 * slowest:
            raise ValueError(
                f"stack.stuck_after_s ({self.stack.stuck_after_s:g}s) must be at least three triggers of the "
                f"streaming jobs ({slowest:g}s): a job finishing a micro-batch per trigger would look stuck"
            )
        return self

    @model_validator(mode="after")
    def _hdfs_paths_apart(self) -> Settings:
        """Each job's HDFS paths are its own: a checkpoint inside another's (or the master dataset)
        would be read as that job's state."""
        paths = {
            "archiver.master_path": self.archiver.master_path,
            "archiver.completeness_path": self.archiver.completeness_path,
            "archiver.checkpoint_dir": self.archiver.checkpoint_dir,
            "speed.checkpoint_dir": self.speed.checkpoint_dir,
            "stack.progress_dir": self.stack.progress_dir,
        }
        named = [(p.rstrip("/") or "/", name) for name, p in paths.items()]
        for path, name in named:
            for other, other_name in named:
                if other_name != name and (other == path or other.startswith(path.rstrip("/") + "/")):
                    raise ValueError(f"{other_name} ({other}) must not be {name} ({path}) or inside it")
        return self

    @model_validator(mode="after")
    def _absolute_paths(self) -> Settings:
        for name in ("state_dir", "jars_dir"):
            value = getattr(self, name)
            if not value.is_absolute():
                object.__setattr__(self, name, (Path.cwd() / value).resolve())
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = config_path()
        if config_file is not None:
            sources.append(_TomlFile(settings_cls, toml_file=config_file))
        return tuple(sources)


class SettingsFileError(ValueError):
    """The TOML settings file is missing, unreadable or not TOML: the message names the file."""


class _TomlFile(TomlConfigSettingsSource):
    """The TOML settings file; an error reading it names the file (tomllib's does not)."""

    def _read_file(self, file_path: Path) -> dict[str, Any]:
        try:
            return super()._read_file(file_path)
        except (OSError, ValueError, RecursionError) as exc:  # TOMLDecodeError, UnicodeDecodeError: ValueErrors
            raise SettingsFileError(f"the settings file {file_path} is not readable TOML: {exc}") from None


def default_secrets(settings: Settings) -> list[str]:
    """The settings still holding their development defaults: refused outside development."""
    found = []
    if settings.api.token.get_secret_value() == DEFAULT_TOKEN:
        found.append("api.token (LAMBDA_API__TOKEN)")
    if settings.api.admin_token.get_secret_value() == DEFAULT_TOKEN:
        found.append("api.admin_token (LAMBDA_API__ADMIN_TOKEN)")
    if settings.airflow.admin_password.get_secret_value() == DEFAULT_AIRFLOW_PASSWORD:
        found.append("airflow.admin_password (LAMBDA_AIRFLOW__ADMIN_PASSWORD)")
    return found


def config_path() -> Path | None:
    """The TOML settings file in force, or None."""
    explicit = os.environ.get("LAMBDA_CONFIG")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise SettingsFileError(f"LAMBDA_CONFIG names {path}, which is not a file")
    else:
        path = Path.cwd() / "lambda.toml"
        if not path.is_file():
            return None
    from definitions.files import open_to_others

    # It names the Java and the view modules every process runs, and `up` persists what it says.
    problem = open_to_others(path)
    if problem:
        raise SettingsFileError(f"the settings file {path} is not read: {problem}")
    return path


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, loaded once: the persisted settings of the state directory (written
    by the first `lambdactl up`) under the explicit ones (definitions.settings_store)."""
    from definitions.settings_store import load

    return load()


def process_settings(process: str) -> Settings:
    """get_settings for a process's entry point: settings it cannot load end it at once (exit 2)
    with one line naming what is wrong, not a traceback at every restart (logging is not set up yet:
    the line goes to stderr, which the supervisor writes to the process's log)."""
    from definitions.settings_store import SettingsConflict

    try:
        return get_settings()
    except (SettingsConflict, ValueError, OSError, RecursionError) as exc:
        print(f"{process}: refusing to start: the settings cannot be loaded: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
