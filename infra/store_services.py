"""The stores of the local stack (Kafka, HDFS, HBase, Cassandra): how each is configured from
infra/templates, launched as a JVM with its heap sized on purpose, and checked."""

from __future__ import annotations

import base64
import secrets
import uuid

from definitions.settings import Settings
from definitions.spark import hdfs_replication
from infra.errors import StackError
from infra.java import JavaRuntime
from infra.service_base import (
    _CASSANDRA_FLAGS,
    _HADOOP_OPENS,
    _HBASE_FLAGS,
    Service,
    ServiceDirs,
    _run_once,
    render_template,
)
from stores import health

LOCAL_SASL_USER = "lambda"


def local_sasl_password(settings: Settings) -> str:
    """The password of user `lambda` on the local broker's SASL listener: generated once, kept
    private in Kafka's configuration directory (never a setting of its own, never in git)."""
    from definitions.files import write_private

    path = KAFKA.dirs(settings).conf / "sasl-password"
    if not path.exists():
        write_private(path, secrets.token_urlsafe(24))
    return path.read_text().strip()


def transaction_max_timeout_ms(settings: Settings) -> int:
    """The longest transaction the local broker lets a producer keep open: half the speed layer's
    de-duplication window (at least 10 s; server.properties)."""
    return max(10_000, settings.speed.dedupe_window_s * 500)


def _render_kafka(settings: Settings, dirs: ServiceDirs, java: JavaRuntime) -> None:
    from infra.local_tls import local_tls

    k = settings.kafka
    listeners, config = [], []
    if k.sasl_listener_port:
        listeners.append(f",SASL_PLAINTEXT://{k.host}:{k.sasl_listener_port}")
        config += [
            "sasl.enabled.mechanisms=PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config="
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{LOCAL_SASL_USER}="{local_sasl_password(settings)}";',
        ]
    if k.ssl_listener_port:  # TLS, and a client certificate from the local CA required (mutual TLS)
        tls = local_tls(settings)
        listeners.append(f",SSL://{k.host}:{k.ssl_listener_port}")
        config += [
            "listener.name.ssl.ssl.keystore.type=PEM",
            f"listener.name.ssl.ssl.keystore.location={tls.server_keystore}",
            "listener.name.ssl.ssl.truststore.type=PEM",
            f"listener.name.ssl.ssl.truststore.location={tls.ca}",
            "listener.name.ssl.ssl.client.auth=required",
        ]
    render_template(
        "kafka/server.properties",
        dirs.conf / "server.properties",
        private=bool(k.sasl_listener_port),  # the SASL listener's password is in it
        host=k.host,
        port=k.port,
        controller_port=k.controller_port,
        data_dir=dirs.data,
        partitions=k.partitions,
        retention_hours=k.retention_hours,
        transaction_max_timeout_ms=transaction_max_timeout_ms(settings),
        extra_listeners="".join(listeners),
        listener_config="\n".join(config),
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
    ports=lambda s: {
        "broker": s.kafka.port,
        "controller": s.kafka.controller_port,
        **({"sasl": s.kafka.sasl_listener_port} if s.kafka.sasl_listener_port else {}),
        **({"ssl": s.kafka.ssl_listener_port} if s.kafka.ssl_listener_port else {}),
    },
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
        replication=hdfs_replication(settings) or 1,
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
        thrift_bind=b.thrift_bind or b.host,
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
    host=lambda s: s.hbase.thrift_bind or s.hbase.host,  # where it listens: its ports are checked there
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
        host=(c.hosts[0] if c.hosts else "127.0.0.1").removeprefix("[").removesuffix("]"),  # an address, not a URL's
        port=c.port,
        storage_port=c.storage_port,
        data_dir=dirs.data / "data",
        commitlog_dir=dirs.data / "commitlog",
        saved_caches_dir=dirs.data / "saved_caches",
        hints_dir=dirs.data / "hints",
        cdc_raw_dir=dirs.data / "cdc_raw",
        commitlog_sync=commitlog_sync_yaml(c),
        client_encryption=client_encryption_yaml(settings),
    )
    render_template("cassandra/logback.xml", dirs.conf / "logback.xml")


def client_encryption_yaml(settings: Settings) -> str:
    """cassandra.yaml lines for TLS clients of the local node (cassandra.local_client_tls): optional,
    so plain clients keep working on the same port; a TLS client must present a certificate from the
    local stack's CA."""
    if not settings.cassandra.local_client_tls:
        return "client_encryption_options:\n  enabled: false"
    from infra.local_tls import local_tls

    tls = local_tls(settings)
    return "\n".join(
        [
            "client_encryption_options:",
            "  enabled: true",
            "  optional: true",
            "  require_client_auth: true",
            "  ssl_context_factory:",
            "    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory",
            f"  keystore: {tls.server_keystore}",
            f"  truststore: {tls.ca}",
        ]
    )


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
