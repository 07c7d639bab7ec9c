"""The services of the local stack: how each one is configured, launched and checked.

Every service is a JVM started as `java -cp 'conf:jars/<group>/*' MainClass`, its configuration
rendered from infra/templates into the state directory, its heap sized on purpose.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

from definitions.settings import Settings
from infra.errors import StackError
from infra.java import JavaRuntime
from stores import health

TEMPLATES = Path(__file__).resolve().parent / "templates"
JAVA_DIR = Path(__file__).resolve().parent / "java"

# JPMS openings the Hadoop, HBase and Cassandra code bases need on Java 17.
_HADOOP_OPENS = [
    f"--add-opens=java.base/{pkg}=ALL-UNNAMED"
    for pkg in (
        "java.io",
        "java.lang",
        "java.lang.reflect",
        "java.math",
        "java.net",
        "java.nio",
        "java.text",
        "java.util",
        "java.util.concurrent",
        "java.util.zip",
        "sun.nio.ch",
        "sun.security.util",
        "sun.security.x509",
        "jdk.internal.ref",
    )
]
_HBASE_FLAGS = [
    "-Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true",
    "--add-modules=jdk.unsupported",
    *_HADOOP_OPENS,
    "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.dns=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.util=ALL-UNNAMED",
]
_CASSANDRA_FLAGS = [
    "-Djdk.attach.allowAttachSelf=true",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports=java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports=java.sql/java.sql=ALL-UNNAMED",
    "--add-exports=java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports=jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports=jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-opens=jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens=jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
]
# Small JVM footprint for every service on a shared 2-core machine.
_COMMON_JVM = [
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xss512k",
    "-XX:MaxMetaspaceSize=256m",
    "-Djava.net.preferIPv4Stack=true",
]


@dataclass(frozen=True)
class ServiceDirs:
    root: Path

    @property
    def conf(self) -> Path:
        return self.root / "conf"

    @property
    def data(self) -> Path:
        return self.root / "data"


@dataclass(frozen=True)
class Service:
    name: str
    jar_group: str
    main_class: str
    heap_mb: Callable[[Settings], int]
    ports: Callable[[Settings], dict[str, int]]
    host: Callable[[Settings], str]
    render: Callable[[Settings, ServiceDirs, JavaRuntime], None]
    args: Callable[[ServiceDirs], list[str]]
    jvm_flags: Callable[[Settings, ServiceDirs], list[str]]
    check: Callable[[Settings], str]
    timeout_s: Callable[[Settings], float]
    after: tuple[str, ...] = ()
    shares_conf_with: str = ""
    extra_classpath: tuple[str, ...] = field(default=())
    # Phase 0: the stores, started together; phase 1: the platform's own processes, started
    # once the stores are healthy and bootstrapped.
    phase: int = 0

    def dirs(self, settings: Settings) -> ServiceDirs:
        return ServiceDirs(settings.state_dir / (self.shares_conf_with or self.name))

    def command(self, settings: Settings, java: JavaRuntime) -> list[str]:
        dirs = self.dirs(settings)
        jars = settings.jars_dir / self.jar_group
        classpath = ":".join([str(dirs.conf), f"{jars}/*", *self.extra_classpath])
        heap = f"{self.heap_mb(settings)}m"
        return [
            str(java.executable),
            f"-Xms{heap}",
            f"-Xmx{heap}",
            *_COMMON_JVM,
            *self.jvm_flags(settings, dirs),
            "-cp",
            classpath,
            self.main_class,
            *self.args(dirs),
        ]

    def check_jars(self, settings: Settings) -> None:
        jars = settings.jars_dir / self.jar_group
        if not jars.is_dir() or not any(jars.glob("*.jar")):
            raise StackError(self.name, f"no jars in {jars}: run `make setup` (mvn resolves them from infra/maven)")


def render_template(source: str, target: Path, **values: object) -> None:
    text = Template((TEMPLATES / source).read_text()).substitute({k: str(v) for k, v in values.items()})
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def _run_once(service: str, marker: Path, command: list[str], cwd: Path) -> None:
    """Run a one-time initialisation command (storage formatting) unless `marker` exists."""
    if marker.exists():
        return
    cwd.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=180)
    if done.returncode != 0 or not marker.exists():
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise StackError(service, f"storage initialisation failed (exit {done.returncode})", tail)


# --- Kafka -----------------------------------------------------------------------------------


def _render_kafka(settings: Settings, dirs: ServiceDirs, java: JavaRuntime) -> None:
    k = settings.kafka
    render_template(
        "kafka/server.properties",
        dirs.conf / "server.properties",
        host=k.host,
        port=k.port,
        controller_port=k.controller_port,
        data_dir=dirs.data,
        partitions=k.partitions,
        retention_hours=k.retention_hours,
    )
    render_template("kafka/log4j.properties", dirs.conf / "log4j.properties")
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=").replace("-", "k")
    jars = settings.jars_dir / KAFKA.jar_group
    _run_once(
        "kafka",
        dirs.data / "meta.properties",
        [
            str(java.executable),
            "-Xmx256m",
            f"-Dlog4j.configuration=file:{dirs.conf / 'log4j.properties'}",
            "-cp",
            f"{jars}/*",
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster_id,
            "-c",
            str(dirs.conf / "server.properties"),
            "-g",
        ],
        dirs.root,
    )


KAFKA = Service(
    name="kafka",
    jar_group="kafka",
    main_class="kafka.Kafka",
    heap_mb=lambda s: s.kafka.heap_mb,
    ports=lambda s: {"broker": s.kafka.port, "controller": s.kafka.controller_port},
    host=lambda s: s.kafka.host,
    render=_render_kafka,
    args=lambda d: [str(d.conf / "server.properties")],
    jvm_flags=lambda s, d: [
        f"-Dlog4j.configuration=file:{d.conf / 'log4j.properties'}",
        f"-Dkafka.logs.dir={d.root / 'logs'}",
    ],
    check=health.kafka,
    timeout_s=lambda s: s.kafka.health_timeout_s,
)


# --- HDFS ------------------------------------------------------------------------------------


def _render_hdfs(settings: Settings, dirs: ServiceDirs, java: JavaRuntime) -> None:
    h = settings.hdfs
    render_template(
        "hadoop/core-site.xml", dirs.conf / "core-site.xml", host=h.host, port=h.port, tmp_dir=dirs.root / "tmp"
    )
    render_template(
        "hadoop/hdfs-site.xml",
        dirs.conf / "hdfs-site.xml",
        host=h.host,
        http_port=h.http_port,
        name_dir=dirs.data / "name",
        data_dir=dirs.data / "data",
        datanode_port=h.datanode_port,
        datanode_http_port=h.datanode_http_port,
        datanode_ipc_port=h.datanode_ipc_port,
    )
    render_template("hadoop/log4j.properties", dirs.conf / "log4j.properties")
    # The daemons' HTTP servers look up webapps/<name> on the classpath; the Maven jars do not
    # carry the distribution's static UI pages, and WebHDFS needs none of them.
    for webapp in ("hdfs", "datanode", "secondary"):
        (dirs.conf / "webapps" / webapp).mkdir(parents=True, exist_ok=True)


def _render_namenode(settings: Settings, dirs: ServiceDirs, java: JavaRuntime) -> None:
    _render_hdfs(settings, dirs, java)
    jars = settings.jars_dir / NAMENODE.jar_group
    _run_once(
        "hdfs-namenode",
        dirs.data / "name" / "current" / "VERSION",
        [
            str(java.executable),
            "-Xmx256m",
            *_HADOOP_OPENS,
            f"-Dhadoop.home.dir={dirs.root}",
            "-cp",
            f"{dirs.conf}:{jars}/*",
            NAMENODE.main_class,
            "-format",
            "-nonInteractive",
            "-force",
        ],
        dirs.root,
    )


def _hadoop_flags(settings: Settings, dirs: ServiceDirs) -> list[str]:
    return [*_HADOOP_OPENS, f"-Dhadoop.home.dir={dirs.root}", f"-Dhadoop.log.dir={dirs.root / 'logs'}"]


NAMENODE = Service(
    name="hdfs-namenode",
    jar_group="hadoop",
    main_class="org.apache.hadoop.hdfs.server.namenode.NameNode",
    heap_mb=lambda s: s.hdfs.namenode_heap_mb,
    ports=lambda s: {"rpc": s.hdfs.port, "http": s.hdfs.http_port},
    host=lambda s: s.hdfs.host,
    render=_render_namenode,
    args=lambda d: [],
    jvm_flags=_hadoop_flags,
    check=health.hdfs_namenode,
    timeout_s=lambda s: s.hdfs.health_timeout_s,
    shares_conf_with="hdfs",
)

DATANODE = Service(
    name="hdfs-datanode",
    jar_group="hadoop",
    main_class="org.apache.hadoop.hdfs.server.datanode.DataNode",
    heap_mb=lambda s: s.hdfs.datanode_heap_mb,
    ports=lambda s: {"data": s.hdfs.datanode_port, "http": s.hdfs.datanode_http_port, "ipc": s.hdfs.datanode_ipc_port},
    host=lambda s: s.hdfs.host,
    render=_render_hdfs,
    args=lambda d: [],
    jvm_flags=_hadoop_flags,
    check=health.hdfs_write_read,
    timeout_s=lambda s: s.hdfs.health_timeout_s,
    after=("hdfs-namenode",),
    shares_conf_with="hdfs",
)


# --- HBase -----------------------------------------------------------------------------------


def _render_hbase(settings: Settings, dirs: ServiceDirs, java: JavaRuntime) -> None:
    b = settings.hbase
    rootdir = b.rootdir or f"file://{dirs.data / 'root'}"
    render_template(
        "hbase/hbase-site.xml",
        dirs.conf / "hbase-site.xml",
        host=b.host,
        rootdir=rootdir,
        tmp_dir=dirs.root / "tmp",
        zookeeper_port=b.zookeeper_port,
        zookeeper_dir=dirs.data / "zookeeper",
        master_port=b.master_port,
        master_info_port=b.master_info_port,
        regionserver_port=b.regionserver_port,
        regionserver_info_port=b.regionserver_info_port,
        thrift_port=b.thrift_port,
        thrift_info_port=b.thrift_info_port,
    )
    render_template("hbase/log4j2.properties", dirs.conf / "log4j2.properties")


def _hbase_flags(settings: Settings, dirs: ServiceDirs) -> list[str]:
    return [
        *_HBASE_FLAGS,
        f"-Dlog4j2.configurationFile={dirs.conf / 'log4j2.properties'}",
        f"-Dhbase.log.dir={dirs.root / 'logs'}",
        f"-Dhadoop.home.dir={dirs.root}",
    ]


HBASE = Service(
    name="hbase",
    jar_group="hbase",
    main_class="org.apache.hadoop.hbase.master.HMaster",
    heap_mb=lambda s: s.hbase.master_heap_mb,
    ports=lambda s: {
        "zookeeper": s.hbase.zookeeper_port,
        "master": s.hbase.master_port,
        "master-info": s.hbase.master_info_port,
        "regionserver": s.hbase.regionserver_port,
        "regionserver-info": s.hbase.regionserver_info_port,
    },
    host=lambda s: s.hbase.host,
    render=_render_hbase,
    args=lambda d: ["start"],
    jvm_flags=_hbase_flags,
    check=health.hbase_master,
    timeout_s=lambda s: s.hbase.health_timeout_s,
)

HBASE_THRIFT = Service(
    name="hbase-thrift",
    jar_group="hbase",
    main_class="org.apache.hadoop.hbase.thrift.ThriftServer",
    heap_mb=lambda s: s.hbase.thrift_heap_mb,
    ports=lambda s: {"thrift": s.hbase.thrift_port, "info": s.hbase.thrift_info_port},
    host=lambda s: s.hbase.host,
    render=_render_hbase,
    args=lambda d: ["start"],
    jvm_flags=_hbase_flags,
    check=health.hbase_thrift,
    timeout_s=lambda s: s.hbase.health_timeout_s,
    after=("hbase",),
    shares_conf_with="hbase",
)


# --- Cassandra -------------------------------------------------------------------------------


def _render_cassandra(settings: Settings, dirs: ServiceDirs, java: JavaRuntime) -> None:
    c = settings.cassandra
    render_template(
        "cassandra/cassandra.yaml",
        dirs.conf / "cassandra.yaml",
        host=c.hosts[0] if c.hosts else "127.0.0.1",
        port=c.port,
        storage_port=c.storage_port,
        data_dir=dirs.data / "data",
        commitlog_dir=dirs.data / "commitlog",
        saved_caches_dir=dirs.data / "saved_caches",
        hints_dir=dirs.data / "hints",
        cdc_raw_dir=dirs.data / "cdc_raw",
        commitlog_sync=commitlog_sync_yaml(c),
    )
    render_template("cassandra/logback.xml", dirs.conf / "logback.xml")


def commitlog_sync_yaml(c) -> str:
    """cassandra.yaml lines for the commit log durability setting (each mode takes its own keys)."""
    if c.commitlog_sync == "batch":
        return "commitlog_sync: batch"
    if c.commitlog_sync == "group":
        return f"commitlog_sync: group\ncommitlog_sync_group_window: {c.commitlog_sync_group_window_ms}ms"
    return f"commitlog_sync: periodic\ncommitlog_sync_period: {c.commitlog_sync_period_ms}ms"


def _cassandra_flags(settings: Settings, dirs: ServiceDirs) -> list[str]:
    jars = settings.jars_dir / CASSANDRA.jar_group
    jamm = sorted(jars.glob("jamm-*.jar"))
    if not jamm:
        raise StackError("cassandra", f"jamm agent jar missing from {jars}: run `make setup`")
    return [
        f"-javaagent:{jamm[-1]}",
        *_CASSANDRA_FLAGS,
        f"-Dcassandra.config=file://{dirs.conf / 'cassandra.yaml'}",
        f"-Dlogback.configurationFile={dirs.conf / 'logback.xml'}",
        f"-Dcassandra.storagedir={dirs.data}",
        f"-Dcassandra.logdir={dirs.root / 'logs'}",
        "-Dcassandra-foreground=yes",
        "-Dcassandra.skip_wait_for_gossip_to_settle=0",
        "-Dcassandra.load_ring_state=false",
        "-XX:MaxDirectMemorySize=256m",
    ]


CASSANDRA = Service(
    name="cassandra",
    jar_group="cassandra",
    main_class="org.apache.cassandra.service.CassandraDaemon",
    heap_mb=lambda s: s.cassandra.heap_mb,
    ports=lambda s: {"native": s.cassandra.port, "storage": s.cassandra.storage_port},
    host=lambda s: s.cassandra.hosts[0] if s.cassandra.hosts else "127.0.0.1",
    render=_render_cassandra,
    args=lambda d: [],
    jvm_flags=_cassandra_flags,
    check=health.cassandra,
    timeout_s=lambda s: s.cassandra.health_timeout_s,
)

# --- The platform's own processes ----------------------------------------------------------------


@dataclass(frozen=True)
class PlatformProcess:
    """A process of the platform itself (a Spark job, the API), run with the virtualenv's Python."""

    name: str
    module: str
    check: Callable[[Settings], str]
    timeout_s: Callable[[Settings], float]
    ports: Callable[[Settings], dict[str, int]] = lambda s: {}
    host: Callable[[Settings], str] = lambda s: "127.0.0.1"
    needs_spark: bool = True
    phase: int = 1

    def dirs(self, settings: Settings) -> ServiceDirs:
        return ServiceDirs(settings.state_dir / self.name)

    def render(self, settings: Settings, dirs: ServiceDirs, java: JavaRuntime) -> None:
        dirs.root.mkdir(parents=True, exist_ok=True)

    def command(self, settings: Settings, java: JavaRuntime) -> list[str]:
        return [sys.executable, "-m", self.module]

    def check_jars(self, settings: Settings) -> None:
        if self.needs_spark:
            folder = settings.jars_dir / "spark-kafka"
            if not any(folder.glob("*.jar")):
                raise StackError(self.name, f"no Spark Kafka connector jars in {folder}: run `make setup`")


ARCHIVER = PlatformProcess(
    name="archiver",
    module="ingest.archiver",
    check=health.archiver,
    timeout_s=lambda s: s.archiver.health_timeout_s,
)

SPEED_LAYER = PlatformProcess(
    name="speed-layer",
    module="speed_layer.job",
    check=health.speed_layer,
    timeout_s=lambda s: s.speed.health_timeout_s,
)

API = PlatformProcess(
    name="api",
    module="api.server",
    check=health.api,
    timeout_s=lambda s: s.api.health_timeout_s,
    ports=lambda s: {"http": s.api.port},
    host=lambda s: s.api.host,
    needs_spark=False,
)

AIRFLOW = PlatformProcess(
    name="airflow",
    module="infra.airflow",
    check=health.airflow,
    timeout_s=lambda s: s.airflow.health_timeout_s,
    ports=lambda s: {"api": s.airflow.port},
    host=lambda s: s.airflow.host,
    needs_spark=False,
)

ALL: tuple[Service | PlatformProcess, ...] = (
    KAFKA,
    NAMENODE,
    DATANODE,
    HBASE,
    HBASE_THRIFT,
    CASSANDRA,
    ARCHIVER,
    SPEED_LAYER,
    API,
    AIRFLOW,
)
BY_NAME = {s.name: s for s in ALL}
