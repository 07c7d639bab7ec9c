"""Loading a computed view into its HBase table as HFiles (batch.load = "bulk"): the Spark tasks
write the cells (stores/batch_cells) into HFiles, sorted as HBase keeps them, and HBase takes the
files in whole (stores/jvm/HBaseBulkLoad.java, compiled by infra/setup.sh) — no put goes through
Thrift. The table and its verification are those of stores/batch_writer.

The HFiles go to a folder of the state directory, by a file:// path: the driver and the executors
must share it (local mode, or a cluster on one machine), and so must HBase's region servers, which
move or copy the files in."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Literal

from definitions.settings import Settings
from definitions.spark import cached
from definitions.views import View
from stores.batch_cells import table_cells
from stores.batch_layout import FAMILY, SKETCH, VALUE
from stores.batch_writer import RangeCounter, TableStats, Written, computed_stats, sample_row_keys

log = logging.getLogger("lambda.batch")

LOAD_CLASS = "lambdaplatform.stores.HBaseBulkLoad"
COUNT_CLASS = "lambdaplatform.stores.HBaseTableStats"  # verification's counts (range_counter)
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


def chosen_load(settings: Settings) -> Literal["puts", "bulk"]:
    """The load a batch run uses: `batch.load` when it names one; for "auto", HFiles when HBase is a
    service `lambdactl up` runs on this machine and Spark's executors run here too (local mode or
    the local cluster), so that HBase reads the files where the executors wrote them; otherwise
    (a real Spark cluster, an HBase elsewhere such as another container) puts."""
    from definitions.spark import on_cluster

    if settings.batch.load != "auto":
        return settings.batch.load
    spark_here = not on_cluster(settings) or settings.spark.cluster.workers > 0
    return "bulk" if spark_here and "hbase" in settings.stack.managed_services else "puts"


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
    for name in (LOAD_CLASS, COUNT_CLASS, "org.apache.hadoop.hbase.tool.BulkLoadHFiles"):
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


def range_counter(settings: Settings, spark, table: str, view: View) -> RangeCounter:
    """Counts row ranges of `table` as stores.batch_writer's Thrift scan does, from the driver's JVM
    (stores/jvm/HBaseTableStats.java): the region servers send their rows to an HBase client in the
    JVM that already holds the bulk load's classes, not through the Thrift server and Python (the
    sampled rows verify_table also looks up still go through Thrift). Ranges may be counted from
    several threads at once."""
    stats = spark.sparkContext._jvm.lambdaplatform.stores.HBaseTableStats
    conf = hbase_conf(settings, spark)
    name = f"{settings.hbase.namespace}:{table}"
    qualifier = VALUE.split(b":", 1)[1].decode() if view.layout == "by_key" else None
    skip = SKETCH.split(b":", 1)[1].decode()

    def count(start: bytes | None, stop: bytes | None) -> TableStats:
        rows, cells, checksum = stats.range(name, FAMILY.decode(), qualifier, skip, start, stop, conf).split(",")
        return TableStats(int(rows), int(cells), int(checksum))

    return count


def _folders(settings: Settings) -> Path:
    return settings.state_dir / "run" / "bulk-load"


@contextlib.contextmanager
def _load_folder(settings: Settings, name: str):
    """A fresh folder for one load's HFiles, removed afterwards. While the load runs it holds an
    exclusive lock on `<folder>.lock` beside it (taken before the folder exists), which the kernel
    drops when the process dies: that is how sweep_leftovers tells a killed run's folder from a
    live one, whatever its pid, host or clock."""
    root = _folders(settings)
    root.mkdir(parents=True, exist_ok=True)
    folder = root / name
    with _locked(folder.with_name(name + ".lock")):
        try:
            folder.mkdir()
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            folder.with_name(name + ".lock").unlink(missing_ok=True)


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on the file at `path`, as it is once locked: a sweep may take the lock
    between the open and the lock, and remove the file (it found no folder yet). A lock on a file
    no longer at `path` is dropped, and the file made again."""
    while True:
        with open(path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if os.fstat(lock.fileno()).st_ino != os.stat(path).st_ino:
                    continue
            except FileNotFoundError:
                continue
            yield
            return


def sweep_leftovers(settings: Settings) -> list[Path]:
    """Remove the HFile folders of loads whose process is gone (a killed batch run: its clean-up
    never ran), the folders removed: those whose lock nobody holds. A folder without a lock file
    is left alone."""
    root = _folders(settings)
    removed = []
    for lock_file in sorted(root.glob("*.lock")) if root.is_dir() else []:
        folder = lock_file.with_name(lock_file.name.removesuffix(".lock"))
        with open(lock_file, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its load is running
            if folder.exists():
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
            lock_file.unlink(missing_ok=True)
    if removed:
        log.info("removed %d HFile folder(s) of killed batch runs under %s", len(removed), root)
    return removed


def load_partitions(settings: Settings, spark, table: str, view: View, granularity: str, computed) -> Written:
    """Write one granularity of a view into `table` as HFiles and load them; what was written (the
    figures verification checks and a sample of the row keys, as stores.batch_writer.write_partitions
    gives them)."""
    with cached(computed) as computed:
        stats = computed_stats(view, computed)
        sample = sample_row_keys(view, granularity, computed, stats)
        family = FAMILY.decode()
        partitions = max(1, min(settings.spark.shuffle_partitions, MAX_FILES))
        cells = table_cells(view, granularity, computed)
        jvm = spark.sparkContext._jvm
        loader = jvm.lambdaplatform.stores.HBaseBulkLoad
        with _load_folder(settings, f"{table}-{granularity}-{uuid.uuid4().hex[:12]}") as folder:
            # Not Path.as_uri(): Hadoop's Path keeps %-escapes as they are, so a space in the state
            # directory would become a folder named with "%20" outside it.
            url = f"file://{folder}"
            written = list(loader.write(cells._jdf, family, url, partitions, int(time.time() * 1000)))
            files = [entry.rsplit(",", 2)[0] for entry in written]  # "path,cells,first row": a path may hold commas
            log.info("%s/%s: %d HFiles written, loading them", table, granularity, len(files))
            if files:
                paths = _string_array(spark, files)
                loader.load(f"{settings.hbase.namespace}:{table}", family, paths, hbase_conf(settings, spark))
        return Written(stats, tuple(sample))


def _string_array(spark, values: list[str]):
    gateway = spark.sparkContext._gateway
    array = gateway.new_array(gateway.jvm.java.lang.String, len(values))
    for i, value in enumerate(values):
        array[i] = value
    return array
