"""The settings of Spark (section `spark` of definitions.settings.Settings): its sessions, and the
local standalone cluster `lambdactl up` may run."""

from __future__ import annotations

import re
import shlex
from typing import Annotated

from pydantic import AfterValidator, Field, field_validator, model_validator

from definitions.section import Host, Port
from definitions.section import Section as _Section
from definitions.store_connections import LOCAL_HOST

# A JVM heap size: 768m, 3g (Spark's launcher refuses anything else at start; ASCII digits only).
JVM_SIZE = r"^[0-9]+[kKmMgGtT]$"
_MIB = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2}


def size_mib(size: str) -> float:
    """A JVM size (768m, 3g) in MiB."""
    return int(size[:-1]) * _MIB[size[-1].lower()]


def _spark_can_start_with(size: str) -> str:
    """Spark reserves 300 MiB of its JVM's memory and refuses to start below 1.5 times that;
    a size past a tebibyte is no machine's (a JVM given one refuses to start, naming no setting)."""
    if size_mib(size) < 512:
        raise ValueError("too little for Spark (it reserves 300 MiB and needs 450): give at least 512m")
    if size_mib(size) > 1024**2:
        raise ValueError("more than 1t: no machine has it")
    return size


# The memory of a Spark driver or executor.
SparkMemory = Annotated[str, Field(pattern=JVM_SIZE), AfterValidator(_spark_can_start_with)]


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
    executor_memory: SparkMemory = "768m"
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
        if self.workers and size_mib(self.executor_memory) > self.worker_memory_mb:
            raise ValueError(
                f"spark.cluster.executor_memory {self.executor_memory} exceeds what a worker offers "
                f"(spark.cluster.worker_memory_mb={self.worker_memory_mb}): no application would get an executor"
            )
        return self


UTC_NAMES = ("UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z")


def no_other_zone(name: str, jvm_options: str) -> str:
    """JVM options that set no time zone but UTC (definitions.spark adds UTC to every JVM's), and no
    heap size: Spark's launcher refuses options holding `Xmx` (every job failed to start); the
    heap is a setting of its own."""
    try:
        words = shlex.split(jvm_options)
    except ValueError:
        raise ValueError(
            f"{name} has a quote that is not closed, or ends with a backslash: Spark's launcher refuses it"
        ) from None
    zones = [w.split("=", 1)[1] for w in words if w.startswith("-Duser.timezone=")]  # as Spark reads them
    if any(z not in UTC_NAMES for z in zones):
        raise ValueError(f"{name} must not set -Duser.timezone to another zone than UTC: the time model is UTC")
    if "Xmx" in jvm_options:
        raise ValueError(
            f"{name} must not hold Xmx: Spark refuses to start with a heap size in Java options; give the "
            "driver_memory settings (spark.cluster.executor_memory for executors)"
        )
    return jvm_options


# Spark options that make a batch run read the master dataset wrong without a word: it must fail,
# naming the file, rather than count what it could read.
_SILENT_READS = {
    "spark.sql.files.ignoreMissingFiles": "a master file that is missing would be skipped, its events uncounted",
    "spark.sql.files.ignoreCorruptFiles": "a damaged master file would be skipped, its events uncounted",
    "spark.sql.streaming.fileStreamSink.ignoreMetadata": (
        "the master would be read without its file sink's log, counting files of unfinished batches and files "
        "placed by hand"
    ),
}


# Spark options each governed by a setting of the platform's own, which other code reads too.
_OWN_SETTING = {
    "spark.master": "spark.master",
    "spark.driver.memory": "spark.driver_memory, archiver.driver_memory, speed.driver_memory, batch.driver_memory",
    "spark.executor.memory": "spark.cluster.executor_memory",
}
# Which option values Spark hides in plans, the UI and logs: a pattern given in spark.conf is added to
# these, never put in their place (the platform passes the Kafka client's key and SASL login as options).
REDACTION = {
    "spark.sql.redaction.options.regex": r"(?i)url|keystore\.key|sasl\.jaas\.config",
    "spark.redaction.regex": r"(?i)secret|password|token|access[.]?key",  # Spark 4's default
}


class SparkSettings(_Section):
    # Spark's own master URLs: local[N] (or [*], with a retry count), local-cluster[...], spark://,
    # yarn, k8s:// (another value failed every job at its start, naming no setting).
    master: str = Field(
        "local[*]",
        pattern=r"^(local(\[([1-9][0-9]*|\*)(,[0-9]+)?\])?|local-cluster\[[0-9]+,[0-9]+,[0-9]+\]|spark://\S+|yarn|k8s://\S+)$",
    )
    # The Python interpreter of the executors' Python workers. Empty: the driver's own (right for
    # local mode and for the local cluster); set it to the interpreter path on a real cluster's nodes.
    python: str = ""
    cluster: SparkClusterSettings = SparkClusterSettings()
    driver_memory: SparkMemory = "1g"
    shuffle_partitions: int = Field(4, ge=1, le=10_000)
    ui_enabled: bool = False
    # JVM options of every driver (and executor): G1 returns heap it no longer needs to the
    # system after 30 s without a collection, so an idle streaming job holds what it uses, not
    # its -Xmx. The time zone option is always added.
    jvm_options: str = "-XX:+UseG1GC -XX:G1PeriodicGCInterval=30000 -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30"
    # Extra `spark.*` options passed as-is to every session (not those of _SILENT_READS).
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
            no_other_zone(key, conf.get(key, ""))
        for key, why in _SILENT_READS.items():
            if conf.get(key, "false").strip().lower() != "false":
                raise ValueError(f"{key} must stay false: {why}")
        for key, setting in _OWN_SETTING.items():
            if key in conf:
                raise ValueError(f"{key} is not given here: it has a setting of its own ({setting})")
        for key in REDACTION:
            try:
                re.compile(conf.get(key, ""))
            except re.error as exc:  # Spark's session failed to start on it, naming no setting
                raise ValueError(f"{key} is no regular expression ({exc}): every Spark session would fail") from None
        return conf

    @field_validator("jvm_options")
    @classmethod
    def _jvm_zone_stays_utc(cls, options: str) -> str:
        return no_other_zone("spark.jvm_options", options)
