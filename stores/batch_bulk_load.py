"""Loading a computed view into its HBase table as HFiles (batch.load = "bulk"): the Spark tasks
write the cells (stores/batch_cells) into HFiles, sorted as HBase keeps them, and HBase takes the
files in whole (stores/jvm/HBaseBulkLoad.java, compiled by infra/setup.sh) — no put goes through
Thrift. The table and its verification are those of stores/batch_writer.

The HFiles go to a folder of the state directory, by a file:// path: the driver and the executors
must share it (local mode, or a cluster on one machine), and so must HBase's region servers, which
move or copy the files in."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import socket
import time
import uuid
from pathlib import Path

import psutil

from definitions.settings import Settings
from definitions.views import View
from stores.batch_cells import table_cells
from stores.batch_layout import FAMILY
from stores.batch_writer import Written, computed_stats, sample_row_keys

log = logging.getLogger("lambda.batch")

LOAD_CLASS = "lambdaplatform.stores.HBaseBulkLoad"
LOAD_JAR = Path("hbase-load") / "lambda-hbase-load.jar"
HBASE_GROUP = "hbase"
# What the HFile writer and the bulk loader need beside pyspark's own jars (Hadoop's client,
# ZooKeeper and the metrics library come with pyspark), from the HBase jars infra/maven resolves:
# found by writing and loading on the local stack (without hbase-unsafe, hbase-protocol,
# opentelemetry-semconv or protobuf-java, for one, the write or the load fails with a
# NoClassDefFoundError).
# They go on the JVMs' class path (spark.driver/executor.extraClassPath), not through
# `spark.jars`: loaded apart from Hadoop's classes, HBase's metrics cannot reach Hadoop's
# package-private ones (IllegalAccessError on org.apache.hadoop.metrics2.lib.MetricsInfoImpl).
HBASE_ARTIFACTS = (
    "hbase-client",
    "hbase-common",
    "hbase-hadoop-compat",
    "hbase-hadoop2-compat",
    "hbase-metrics",
    "hbase-metrics-api",
    "hbase-protocol",
    "hbase-protocol-shaded",
    "hbase-server",
    "hbase-zookeeper",
    "hbase-shaded-miscellaneous",
    "hbase-shaded-netty",
    "hbase-shaded-protobuf",
    "hbase-unsafe",
    "opentelemetry-api",
    "opentelemetry-context",
    "opentelemetry-semconv",
    "protobuf-java",
)
# HBase refuses to load more HFiles than this into one region and family at once
# (hbase.mapreduce.bulkload.max.hfiles.perRegion.perFamily, 32 by default).
MAX_FILES = 32
CLASS_PATH_KEYS = ("spark.driver.extraClassPath", "spark.executor.extraClassPath")


class BulkLoadUnavailable(RuntimeError):
    """The bulk load's classes are not where a session can use them."""


def class_path(settings: Settings) -> list[str]:
    """The jars of the bulk load: its own class, then the HBase artifacts (one jar each)."""
    own = settings.jars_dir / LOAD_JAR
    if not own.is_file():
        raise BulkLoadUnavailable(f"{own} is missing: run `make setup` (infra/setup.sh compiles it)")
    folder = settings.jars_dir / HBASE_GROUP
    names = [p.name for p in folder.glob("*.jar")] if folder.is_dir() else []
    jars, missing = [str(own)], []
    for artifact in HBASE_ARTIFACTS:
        pattern = re.compile(rf"{re.escape(artifact)}-\d[^/]*\.jar")
        found = sorted(n for n in names if pattern.fullmatch(n))
        if not found:
            missing.append(artifact)
        else:
            jars.append(str(folder / found[-1]))
    if missing:
        raise BulkLoadUnavailable(f"no jar of {', '.join(missing)} in {folder}: run `make setup`")
    return jars


def session_options(settings: Settings) -> dict[str, str]:
    """The options a batch session needs for the bulk load: the jars on the driver's and the
    executors' class path, after any class path `spark.conf` already gives them."""
    jars = ":".join(class_path(settings))
    options = {}
    for key in CLASS_PATH_KEYS:
        own = settings.spark.conf.get(key, "")
        options[key] = f"{own}:{jars}" if own else jars
    return options


def check_session(spark) -> None:
    """BulkLoadUnavailable unless the session's JVM holds the bulk load (a session started without
    session_options, e.g. before, in the same process)."""
    jvm = spark.sparkContext._jvm
    for name in (LOAD_CLASS, "org.apache.hadoop.hbase.tool.BulkLoadHFiles"):
        try:
            jvm.java.lang.Class.forName(name)
        except Exception:
            raise BulkLoadUnavailable(
                f"the Spark session has no {name}: batch.load = 'bulk' needs a session started with "
                "stores.batch_bulk_load.session_options (a fresh process)"
            ) from None


def hbase_conf(settings: Settings, spark):
    """The HBase client's Configuration (in the driver's JVM) for the platform's HBase."""
    jvm = spark.sparkContext._jvm
    conf = jvm.org.apache.hadoop.hbase.HBaseConfiguration.create()
    conf.set("hbase.zookeeper.quorum", settings.hbase.host)
    conf.set("hbase.zookeeper.property.clientPort", str(settings.hbase.zookeeper_port))
    return conf


def _folders(settings: Settings) -> Path:
    return settings.state_dir / "run" / "bulk-load"


def _process_tag(pid: int) -> str | None:
    """`<pid>.<start time in ms>.<host>` of a running process of this host (the host as 8 hex
    digits of its name's hash), None if there is none with that pid."""
    try:
        started = int(psutil.Process(pid).create_time() * 1000)
    except psutil.Error:
        return None
    return f"{pid}.{started}.{_HOST}"


_HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]
# The folders of this process's loads start with its tag, so that a later run on this host can tell
# the leftovers of a killed one (its process gone, or the pid now another process's); a folder of
# another host's run (a shared state directory) is never taken for one.
_OWNER = _process_tag(os.getpid())
_TAG = re.compile(r"(\d+)\.\d+\.([0-9a-f]{8})-")


def sweep_leftovers(settings: Settings) -> list[Path]:
    """Remove the HFile folders of this host's loads whose process is gone (a killed batch run: its
    `finally` never ran); the folders removed. Folders of other hosts, or not named by a process
    tag, are left."""
    root = _folders(settings)
    removed = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        tag = _TAG.match(folder.name)
        if tag is None or tag[2] != _HOST or folder.name.startswith(f"{_process_tag(int(tag[1]))}-"):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    if removed:
        log.info("removed %d HFile folder(s) of killed batch runs under %s", len(removed), root)
    return removed


def load_partitions(settings: Settings, spark, table: str, view: View, granularity: str, computed) -> Written:
    """Write one granularity of a view into `table` as HFiles and load them; what was written (the
    figures verification checks and a sample of the row keys, as stores.batch_writer.write_partitions
    gives them)."""
    folder = _folders(settings) / f"{_OWNER}-{table}-{granularity}-{uuid.uuid4().hex[:12]}"
    computed = computed.cache()
    try:
        stats = computed_stats(view, computed)
        sample = sample_row_keys(view, granularity, computed, stats)
        family = FAMILY.decode()
        partitions = max(1, min(settings.spark.shuffle_partitions, MAX_FILES))
        cells = table_cells(view, granularity, computed)
        jvm = spark.sparkContext._jvm
        loader = jvm.lambdaplatform.stores.HBaseBulkLoad
        folder.mkdir(parents=True)
        written = list(loader.write(cells._jdf, family, folder.as_uri(), partitions, int(time.time() * 1000)))
        files = [entry.split(",", 2)[0] for entry in written]
        log.info("%s/%s: %d HFiles written, loading them", table, granularity, len(files))
        if files:
            paths = _string_array(spark, files)
            loader.load(f"{settings.hbase.namespace}:{table}", family, paths, hbase_conf(settings, spark))
        return Written(stats, tuple(sample))
    finally:
        computed.unpersist()
        shutil.rmtree(folder, ignore_errors=True)


def _string_array(spark, values: list[str]):
    gateway = spark.sparkContext._gateway
    array = gateway.new_array(gateway.jvm.java.lang.String, len(values))
    for i, value in enumerate(values):
        array[i] = value
    return array
