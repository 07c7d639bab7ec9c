"""Building Spark sessions from settings. Nothing here starts Spark until a function is called."""

from __future__ import annotations

import logging
import os
import re
import secrets
import signal
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from definitions.settings import Settings
from definitions.settings_store import SECRET_NAME
from definitions.spark_settings import REDACTION
from definitions.store_connections import LOCAL_HOST

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

KAFKA_CONNECTOR_GROUP = "spark-kafka"
# The event contract's JVM validator, compiled from definitions/jvm by infra/setup.sh.
CONTRACT_GROUP = "contract"
# The speed layer's de-duplication (a Spark stateful processor), compiled from speed_layer/jvm by infra/setup.sh.
SPEED_LAYER_GROUP = "speed-layer"


def platform_jars(settings: Settings) -> list[str]:
    """The Kafka connector jars resolved by infra/maven (pyspark ships everything else), the event
    contract's validator and the speed layer's de-duplication."""
    jars: list[str] = []
    for group in (KAFKA_CONNECTOR_GROUP, CONTRACT_GROUP, SPEED_LAYER_GROUP):
        folder = settings.jars_dir / group
        found = sorted(str(p) for p in folder.glob("*.jar"))
        if not found:
            raise FileNotFoundError(f"no jars in {folder}: run `make setup`")
        jars += found
    return jars


# The packages a Spark job's code runs from on executors (shipped as one archive on a cluster).
JOB_PACKAGES = ("definitions", "stores", "ingest", "speed_layer", "batch_layer", "reports")


def master_url(settings: Settings) -> str:
    """Where the platform's Spark jobs run: the local standalone cluster when it has workers, else `spark.master`."""
    cluster = settings.spark.cluster
    return cluster.master_url if cluster.workers > 0 else settings.spark.master


def on_cluster(settings: Settings) -> bool:
    return not master_url(settings).startswith("local")


# The local cluster's shared secret (`spark.authenticate`), in the configuration directory of its
# master (infra/spark_services.py runs it as `spark-master`, in <state_dir>/spark-master).
LOCAL_CLUSTER_SECRET = Path("spark-master") / "conf" / "authenticate-secret"
# Options a session must not give the driver's JVM on its command line (see _launch_driver_jvm):
# those whose values are secrets.
LAUNCH_HIDDEN = SECRET_NAME


def local_cluster_secret(settings: Settings) -> str:
    """The shared secret of the local standalone cluster: its master and workers (through their
    private properties files) and every platform application on it authenticate with it. Generated
    once, kept private in the master's configuration directory (never a setting, never in git)."""
    from definitions.files import write_private

    path = settings.state_dir / LOCAL_CLUSTER_SECRET
    if not path.exists():
        # Whoever comes first (`lambdactl up`, a job) creates it; a concurrent second keeps the first's.
        fresh = write_private(path.with_name(f".{path.name}.{secrets.token_hex(4)}"), secrets.token_hex(32))
        try:
            os.link(fresh, path)
        except FileExistsError:
            pass
        finally:
            fresh.unlink()
    secret = path.read_text().strip()
    if not secret:
        raise ValueError(f"{path} is empty: remove it and restart the Spark cluster (`lambdactl down`, then `up`)")
    return secret


def code_archive(settings: Settings) -> Path:
    """The platform's job packages in one zip (named by its content), for the executors of a cluster:
    how Spark distributes Python code (SparkContext.addPyFile), not paths on the driver's machine."""
    import hashlib
    import io
    import zipfile

    root = Path(__file__).resolve().parent.parent
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in JOB_PACKAGES:
            for path in sorted((root / package).rglob("*.py")):
                archive.writestr(zipfile.ZipInfo(str(path.relative_to(root)), (1980, 1, 1, 0, 0, 0)), path.read_bytes())
    data = buffer.getvalue()
    target = settings.state_dir / "run" / "spark" / f"lambda-jobs-{hashlib.sha256(data).hexdigest()[:12]}.zip"
    if not (target.exists() and target.read_bytes() == data):  # one cut short (a power cut) is written again
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        with open(partial, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        partial.replace(target)
    return target


def session_conf(settings: Settings, app_name: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every option a platform session starts with; later keys win."""
    s = settings.spark
    python = s.python or sys.executable
    master = master_url(settings)
    conf = {
        "spark.app.name": app_name,
        "spark.master": master,
        "spark.jars": ",".join(platform_jars(settings)),
        "spark.driver.memory": s.driver_memory,
        "spark.sql.shuffle.partitions": str(s.shuffle_partitions),
        "spark.ui.enabled": str(s.ui_enabled).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        # Query plans, the UI and logs show a source's options with these values hidden: the default
        # (URLs) plus the Kafka client's private key and SASL login (stores.clients.kafka_spark_options).
        "spark.sql.redaction.options.regex": REDACTION["spark.sql.redaction.options.regex"],
        "spark.hadoop.fs.defaultFS": settings.hdfs.url,
        # Closing an HDFS file asks the namenode to complete it; when the datanode's report of the
        # last block has not arrived yet, the client waits and asks again, first after 400 ms by
        # default. Every micro-batch closes several small files (offset log, commit log, state
        # changelogs): ask again after 20 ms, doubling, ten times (about 20 s in all).
        "spark.hadoop.dfs.client.block.write.locateFollowingBlock.initial.delay.ms": "20",
        "spark.hadoop.dfs.client.block.write.locateFollowingBlock.retries": "10",
        "spark.driver.extraJavaOptions": s.jvm_options,  # with the UTC zone, below
        "spark.executor.extraJavaOptions": s.jvm_options,
        # The executors' Python workers: the driver's own virtualenv unless settings name another.
        "spark.pyspark.python": python,
        "spark.pyspark.driver.python": sys.executable,
    }
    cluster = s.cluster
    if master.startswith("local") or (cluster.workers > 0 and cluster.host == LOCAL_HOST):
        conf["spark.driver.host"] = LOCAL_HOST
        conf["spark.driver.bindAddress"] = LOCAL_HOST
    if not master.startswith("local"):
        conf["spark.cores.max"] = str(cluster.app_cores)
        conf["spark.executor.memory"] = cluster.executor_memory
        # Executors' logs roll like every log of the stack.
        conf["spark.executor.logs.rolling.strategy"] = "size"
        conf["spark.executor.logs.rolling.maxSize"] = str(settings.stack.log_max_bytes)
        conf["spark.executor.logs.rolling.maxRetainedFiles"] = str(settings.stack.log_backups)
    if cluster.workers > 0:
        # The local cluster refuses applications without its secret (spark.authenticate). A real
        # cluster's authentication comes with its own options, through `spark.conf`.
        conf["spark.authenticate"] = "true"
        conf["spark.authenticate.secret"] = local_cluster_secret(settings)
    copies = hdfs_replication(settings)
    if copies:
        conf["spark.hadoop.dfs.replication"] = str(copies)
    conf.update(s.conf)
    for key, hidden in REDACTION.items():  # what settings add to hide, besides the platform's own
        if key in s.conf:
            conf[key] = f"{hidden}|(?:{s.conf[key]})"
    conf.update(extra or {})
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        conf[key] = utc_jvm_options(conf[key])
    return conf


def trigger_interval(seconds: float) -> str:
    """A streaming trigger as Spark's interval parser reads it: whole milliseconds. Python wrote
    1e-05 or 1e+16 for some floats, and more than nine decimals, which Spark refuses at start."""
    return f"{max(1, round(seconds * 1000))} milliseconds"


def utc_jvm_options(options: str) -> str:
    """JVM options with the UTC time zone, last (the last -D of a property wins; settings refuse
    another zone): options of spark.conf's own replaced the platform's, and with them went the zone."""
    kept = [o for o in options.split() if not o.startswith("-Duser.timezone=")]
    return " ".join([*kept, "-Duser.timezone=UTC"])


def hdfs_replication(settings: Settings) -> int | None:
    """Copies of each block the platform's files ask for (hdfs.replication): 1 when the platform
    runs HDFS itself (one datanode) and the setting is 0, None (the cluster's own default) when HDFS
    is a cluster's."""
    if settings.hdfs.replication:
        return settings.hdfs.replication
    return 1 if "hdfs-datanode" in settings.stack.managed_services else None


WINDOW_GROUP_LIMIT = "spark.sql.optimizer.windowGroupLimitThreshold"  # -1: the optimisation is off
_GC_CHOICE = re.compile(r"^-XX:[+-]Use\w*GC$")  # -XX:+UseG1GC, -XX:+UseParallelGC, ...


def batch_session_options(settings: Settings) -> dict[str, str]:
    """What a batch run's session sets beyond session_conf: its driver's memory, its JVM options
    (every driver's, spark.jvm_options or spark.conf's own spark.driver.extraJavaOptions, without
    their choice of collector, then batch.jvm_options: one JVM takes one collector), and no
    WindowGroupLimit.

    The run's de-duplication (stores.master.first_copies) keeps row 1 of each event_id's window.
    Spark would sort every record by event_id once more before the shuffle to drop later copies
    early, and almost every event_id has one copy: 10M records, 2 % of them copies, took 34.2 s with
    it and 31.4 s without (de-duplicated and cached; medians of 8 and 4 runs, stack up, 2026-11-28).
    A master dataset made mostly of copies would lose the early dropping: a matter of speed, not of
    which copy is kept."""
    key = "spark.driver.extraJavaOptions"
    every = settings.spark.conf.get(key) or settings.spark.jvm_options
    kept = [o for o in every.split() if not _GC_CHOICE.match(o)]
    return {
        "spark.driver.memory": settings.batch.driver_memory,
        key: utc_jvm_options(" ".join([*kept, *settings.batch.jvm_options.split()])),
        WINDOW_GROUP_LIMIT: "-1",
    }


@contextmanager
def cached(frame: DataFrame) -> Iterator[DataFrame]:
    """`frame` cached while the block runs, then released, unless it was cached before: a frame its
    caller cached (definitions.view_rollup keeps a view's finest cells cached) stays cached, since
    releasing it would cost a recomputation, not a wrong cell."""
    if frame.is_cached:
        yield frame
        return
    frame = frame.cache()
    try:
        yield frame
    finally:
        frame.unpersist()


def spark_session(settings: Settings, app_name: str, extra: Mapping[str, str] | None = None) -> SparkSession:
    from pyspark.sql import SparkSession

    # PySpark picks the workers' interpreter from the environment when the context starts.
    os.environ.setdefault("PYSPARK_PYTHON", settings.spark.python or sys.executable)
    conf = session_conf(settings, app_name, extra)
    _launch_driver_jvm(conf)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    _quiet_trigger_overruns(session)
    if on_cluster(settings):
        session.sparkContext.addPyFile(str(code_archive(settings)))
    return session


# Spark's processing-time trigger warns at every micro-batch that takes longer than its interval
# ("Current batch is falling behind"). A trigger shorter than an idle micro-batch (speed.trigger_s)
# makes that every batch's normal case, not a fault: the next batch then starts as this one ends,
# and each batch's duration is in the job's progress file (stores.progress) for whoever asks.
TRIGGER_OVERRUN_LOGGER = "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor"


def _quiet_trigger_overruns(session: SparkSession) -> None:
    jvm = session.sparkContext._jvm
    assert jvm is not None
    log4j = jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setLevel(TRIGGER_OVERRUN_LOGGER, log4j.Level.ERROR)


def _launch_driver_jvm(conf: Mapping[str, str]) -> None:
    """Start the driver's JVM (once per process) with the session's options but the secret ones
    (`spark.authenticate.secret`, and any password or token of `spark.conf`).
    PySpark starts it with every option on its command line (`spark-submit --conf key=value`),
    which every user of the machine can read (`ps`); the context then takes every option, the
    secret too, over the Py4J gateway when the session is created."""
    from pyspark import SparkConf
    from pyspark.core.context import SparkContext

    visible = [(key, value) for key, value in conf.items() if not LAUNCH_HIDDEN.search(key)]
    SparkContext._ensure_initialized(conf=SparkConf(loadDefaults=False).setAll(visible))


def stop_on_signal(what: str) -> threading.Event:
    """An event that SIGTERM or SIGINT sets: how a long-running streaming job is asked to stop."""
    stopping = threading.Event()

    def stop(signum, _frame) -> None:
        logging.getLogger(__name__).info("signal %d: stopping %s", signum, what)
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return stopping


def watch_queries(queries: Sequence, stopping: threading.Event) -> int:
    """Block until `stopping` is set or a streaming query dies; stop the queries still running.
    The job's exit status: 1 if a query died (its exception is logged), else 0."""
    status = 0
    try:
        while not stopping.is_set():
            for query in queries:
                if not query.isActive:
                    logging.getLogger(__name__).error("query %s stopped: %s", query.name, query.exception())
                    status = 1
                    stopping.set()
            stopping.wait(1.0)
    finally:
        for query in queries:
            if query.isActive:
                query.stop()
    return status


# The JVM exceptions Spark's StreamExecution takes for "the query was stopped" (IO_EXCEPTION_NAMES).
INTERRUPTIONS = (
    "java.lang.InterruptedException",
    "java.io.InterruptedIOException",
    "java.nio.channels.ClosedByInterruptException",
)


class BatchInterrupted(Exception):
    """A foreachBatch function's call into the JVM was interrupted: the query is being stopped."""


class _QuietInterrupted(logging.Filter):
    """Drops py4j's ERROR line and traceback for a BatchInterrupted: the stop it stands for is
    logged once, at INFO, by the function that raised it; every other error passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], BatchInterrupted))


def quiet_interrupted_batches() -> None:
    """Keep a query's stop out of the error log: py4j logs every exception a Python callback raises
    (logger `py4j.clientserver`) with its traceback, a BatchInterrupted included."""
    target = logging.getLogger("py4j.clientserver")
    if not any(isinstance(f, _QuietInterrupted) for f in target.filters):
        target.addFilter(_QuietInterrupted())


def interrupted_call(error: BaseException) -> BatchInterrupted | None:
    """For a foreachBatch function to raise instead of `error` when its call into the JVM was
    interrupted by the query's stop; None for any other error.

    A Python error reaches the stream thread as the whole traceback text, and Spark tells a stop from
    a failure by matching it with PROXY_ERROR (`...calling((.|\\r\\n|\\r|\\n)*)(java.lang.InterruptedException|...)`),
    whose group recurses once per character: on the JVM stack trace that a Py4JJavaError carries
    (thousands of characters) the stream thread dies of a StackOverflowError instead of stopping.
    The replacement carries only the two lines the pattern needs, so the stop is a stop."""
    if type(error).__name__ != "Py4JJavaError":
        return None
    lines = str(error).splitlines()
    first = lines[0] if lines else ""
    thrown = next((line.lstrip(": ").split(":")[0].strip() for line in lines[1:3] if line.startswith(":")), "")
    if not first.startswith("An error occurred while calling") or thrown not in INTERRUPTIONS:
        return None
    return BatchInterrupted(f"py4j.protocol.Py4JJavaError: {first[:200]}\n: {thrown}")
