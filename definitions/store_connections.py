"""How the platform reaches its stores: Kafka, HDFS, HBase and Cassandra, on this machine (the
defaults: the local stack) or on clusters (lists of brokers and hosts, security, replication)."""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, SecretStr, model_validator

from definitions.section import (
    AbsolutePath,
    ContactHost,
    Credential,
    Host,
    Port,
    SecretCredential,
    StoreHost,
    host_port_problem,
    is_port,
)
from definitions.section import Section as _Section

LOCAL_HOST = "127.0.0.1"
DC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# A broker as Kafka's clients (Java and kafka-python) read one: an optional listener name (any
# letters, digits, `_` and `-`: Strimzi's are like PLAIN-9092), a host name, IPv4 address or IPv6
# address in brackets (with its zone), a port.
BROKER = re.compile(
    r"([A-Za-z0-9_-]+://)?(\[[0-9A-Fa-f:.]+(%[A-Za-z0-9._-]+)?\]|[A-Za-z0-9._-]{1,253}):(?P<port>[0-9]{1,5})"
)
TOPIC = r"^[A-Za-z0-9._-]{1,249}$"  # what Kafka accepts as a topic name (but "." and "..")


def _uri_host(name: str) -> str:
    """A name written into hdfs:// URIs, which Java's URI parser reads as a host."""
    if "_" in name:
        raise ValueError(
            "must not contain `_`: Java's URI parser finds no host in hdfs://… then, and every Spark job fails "
            "(Hadoop: Incomplete HDFS URI, no host)"
        )
    return name


def webhdfs_url(url: str) -> bool:
    """Whether `url` is a namenode's (or a gateway's) HTTP address, which /webhdfs/v1 is appended to."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    return (
        # urlsplit drops tabs and line breaks, and takes spaces; HdfsCLI splits its URL on `;`
        re.fullmatch(r"[\x21-\x3a\x3c-\x7e]+", url) is not None
        and parts.scheme in ("http", "https")
        and re.fullmatch(r"[A-Za-z0-9._:-]+", parts.hostname or "") is not None
        and port != 0
        and not (parts.query or parts.fragment or "?" in url or "#" in url)
        and re.fullmatch(r"[A-Za-z0-9._~/-]*", parts.path) is not None
    )


class KafkaSettings(_Section):
    host: StoreHost = LOCAL_HOST
    port: Port = 9092
    # The brokers of a cluster ("host:port" each); empty: host:port above (the local broker).
    bootstrap_servers: list[str] = []
    controller_port: Port = 9093
    events_topic: str = Field("events", pattern=TOPIC)
    dlq_topic: str = Field("events.dlq", pattern=TOPIC)
    # Topics `lambdactl bootstrap` creates: partitions and copies of each (at most the brokers).
    partitions: int = Field(4, ge=1, le=10_000)
    replication_factor: int = Field(1, ge=1, le=16)
    retention_hours: int = Field(168, ge=1, le=10 * 8_760)
    # How the brokers store the platform's topics (their `compression.type`). "uncompressed" makes a
    # broker decompress each batch a producer compressed and refuse it when its records, decompressed,
    # pass `max.message.bytes`: kept as the producer compressed it ("producer", or the same codec), a
    # 30 KB batch can declare a 1 GiB record, and every Java consumer (the archiver, the speed layer)
    # allocates it whole and dies of OutOfMemoryError at every restart.
    stored_compression: Literal["uncompressed", "producer", "gzip", "snappy", "lz4", "zstd"] = "uncompressed"
    # How every client (kafka-python and Spark's) talks to the brokers. SASL takes a user and
    # password (PLAIN or SCRAM); SSL checks the brokers' certificates against `ssl_cafile` (PEM;
    # empty: the system's trusted CAs) and, for brokers that require client certificates (mutual
    # TLS), presents `ssl_certfile` with its private key `ssl_keyfile` (PEM, unencrypted PKCS#8).
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    sasl_username: Credential = ""
    sasl_password: SecretCredential = SecretStr("")
    ssl_cafile: AbsolutePath = ""
    ssl_certfile: AbsolutePath = ""
    ssl_keyfile: AbsolutePath = ""
    # The local broker also listens with SASL_PLAINTEXT (PLAIN) on this port, for user `lambda`
    # with a password generated into its configuration directory: where SASL clients are checked
    # (infra.store_services.local_sasl_password). 0: no such listener.
    sasl_listener_port: int = Field(9094, ge=0, le=65_535)
    # ... and with SSL on this port, requiring a client certificate signed by the local stack's CA
    # (infra.local_tls): where TLS and mutual-TLS clients are checked. 0: no such listener.
    ssl_listener_port: int = Field(9096, ge=0, le=65_535)
    heap_mb: int = Field(512, ge=1, le=2**20)
    health_timeout_s: float = Field(90, gt=0, le=3_600)

    @property
    def bootstrap(self) -> str:
        return ",".join(self.bootstrap_servers) or f"{self.host}:{self.port}"

    @model_validator(mode="after")
    def _dead_letters_apart(self) -> KafkaSettings:
        """The archiver writes records that are no event to dlq_topic: on the events topic itself,
        each would be read again, refused again and written again, for ever."""
        for name in ("events_topic", "dlq_topic"):
            if getattr(self, name) in (".", ".."):
                raise ValueError(f"kafka.{name} {getattr(self, name)!r} is no Kafka topic name")
        if self.dlq_topic == self.events_topic:
            raise ValueError(f"kafka.dlq_topic must not be the events topic ({self.events_topic!r})")
        return self

    @model_validator(mode="after")
    def _sasl_has_credentials(self) -> KafkaSettings:
        if self.security_protocol.startswith("SASL_") and not (
            self.sasl_username and self.sasl_password.get_secret_value()
        ):
            raise ValueError(
                f"kafka.security_protocol {self.security_protocol} needs kafka.sasl_username and kafka.sasl_password"
            )
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            raise ValueError("kafka.ssl_certfile and kafka.ssl_keyfile go together (a client certificate and its key)")
        if self.ssl_certfile and self.security_protocol not in ("SSL", "SASL_SSL"):
            raise ValueError(
                f"kafka.ssl_certfile is a TLS client certificate: it needs kafka.security_protocol SSL or SASL_SSL, "
                f"not {self.security_protocol}"
            )
        for server in (s for entry in self.bootstrap_servers for s in entry.split(",")):
            match = BROKER.fullmatch(server)
            if not match or not is_port(match["port"]):
                raise ValueError(
                    f"kafka.bootstrap_servers: {server!r} is not host:port (a host name, an IPv4 address or an IPv6 "
                    "address in brackets)"
                )
        return self


class HdfsSettings(_Section):
    host: Annotated[Host, AfterValidator(_uri_host)] = LOCAL_HOST
    port: Port = 9000
    # An HA name service: paths become hdfs://<name_service>/… (its namenodes are Hadoop settings,
    # passed through spark.conf as spark.hadoop.dfs.*); empty: hdfs://host:port.
    name_service: Annotated[str, Field(pattern=r"^([A-Za-z0-9._-]{1,253})?$"), AfterValidator(_uri_host)] = ""
    # WebHDFS endpoints tried in turn (an HA pair's namenodes, "http://host:port"); empty: host:http_port.
    webhdfs_urls: list[str] = []
    http_port: Port = 9870
    datanode_port: Port = 9866
    datanode_http_port: Port = 9864
    datanode_ipc_port: Port = 9867
    # The user WebHDFS requests act as; empty: the operating-system user of the process, as Spark's
    # HDFS client does (simple authentication).
    user: str = ""
    # Copies of each block the platform's files ask for; 0: 1 when the platform runs HDFS itself
    # (its one datanode: Spark's client asked for its default, 3, and every file stayed
    # under-replicated for good), else the cluster's own default (its hdfs-site.xml).
    replication: int = Field(0, ge=0, le=512)
    namenode_heap_mb: int = Field(384, ge=1, le=2**20)
    datanode_heap_mb: int = Field(256, ge=1, le=2**20)
    health_timeout_s: float = Field(120, gt=0, le=3_600)

    @model_validator(mode="after")
    def _webhdfs_urls_are_http(self) -> HdfsSettings:
        for number, url in enumerate(self.webhdfs_urls, 1):
            if not webhdfs_url(url):  # not repeated: it may carry a password
                raise ValueError(
                    f"hdfs.webhdfs_urls: entry {number} is not http(s)://[user@]host[:port][/path] (no query)"
                )
        return self

    @property
    def url(self) -> str:
        return f"hdfs://{self.name_service}" if self.name_service else f"hdfs://{self.host}:{self.port}"

    @property
    def webhdfs_endpoints(self) -> list[str]:
        return [u.rstrip("/") for u in self.webhdfs_urls] or [f"http://{self.host}:{self.http_port}"]

    @property
    def webhdfs(self) -> str:
        return f"{self.webhdfs_endpoints[0]}/webhdfs/v1"


class HBaseSettings(_Section):
    host: Host = LOCAL_HOST
    thrift_port: Port = 9090
    # Thrift servers tried in turn ("host" or "host:port"): a new connection goes to the first that
    # answers; empty: host:thrift_port.
    thrift_hosts: list[str] = []
    # The address the Thrift server listens on (and its info page); empty: host. A Thrift server on
    # a machine (a container) of its own listens on its own address, or 0.0.0.0.
    thrift_bind: str = Field("", pattern=r"^([A-Za-z0-9._:%\[\]-]{1,253})?$")
    thrift_info_port: Port = 9095
    master_port: Port = 16000
    master_info_port: Port = 16010
    regionserver_port: Port = 16020
    regionserver_info_port: Port = 16030
    zookeeper_port: Port = 2181
    # As HBase accepts them: a namespace of letters, digits and _; a table name that may also hold
    # . and - (not first).
    namespace: str = Field("lambda", pattern=r"^[A-Za-z0-9_]{1,64}$")
    meta_table: str = Field("meta", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
    # Where the standalone master keeps its tables: an absolute path or a URI (file:, hdfs:, s3a:),
    # without blanks or $ (Hadoop expands ${...} in its XML); empty = a directory in the state dir.
    rootdir: str = Field("", pattern=r"^$|^(/|[A-Za-z][A-Za-z0-9+.-]*:)[^\s$]*$")
    master_heap_mb: int = Field(768, ge=1, le=2**20)
    thrift_heap_mb: int = Field(256, ge=1, le=2**20)
    health_timeout_s: float = Field(150, gt=0, le=3_600)

    @property
    def thrift_endpoints(self) -> list[tuple[str, int]]:
        out = []
        for entry in self.thrift_hosts or [self.host]:
            host, _, port = entry.rpartition(":") if ":" in entry else (entry, "", "")
            out.append((host, int(port) if port else self.thrift_port))
        return out

    @model_validator(mode="after")
    def _thrift_hosts_parse(self) -> HBaseSettings:
        for entry in self.thrift_hosts:
            if host_port_problem(entry if ":" in entry else f"{entry}:1"):
                raise ValueError(f"hbase.thrift_hosts: {entry!r} is not host or host:port (no scheme, no IPv6 address)")
        return self


class CassandraSettings(_Section):
    hosts: list[ContactHost] = Field([LOCAL_HOST], min_length=1)
    port: Port = 9042
    storage_port: Port = 7000
    # Used unquoted in CQL (Cassandra folds unquoted names to lower case): a lower-case identifier.
    keyspace: str = Field("lambda", pattern=r"^[a-z][a-z0-9_]{0,47}$")
    # The keyspace the platform creates: SimpleStrategy with `replication_factor`, or, when
    # `replication` names data centres, NetworkTopologyStrategy with those copies per data centre.
    replication_factor: int = Field(1, ge=1, le=16)
    replication: dict[str, Annotated[int, Field(le=16)]] = {}  # below 1: refused naming it (below)
    # The data centre the clients send requests to first; empty: the first contact point's.
    local_dc: str = Field("", pattern=r"^$|^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    # The replicas every read and write of the platform waits for: a quorum, so that a read meets
    # at least one replica that took each acknowledged write (with one copy, that copy). LOCAL_QUORUM
    # counts the client's data centre only; QUORUM, every copy (reads then cross data centres).
    consistency: Literal["LOCAL_QUORUM", "QUORUM"] = "LOCAL_QUORUM"
    # Password authentication (PasswordAuthenticator); empty username: none.
    username: Credential = ""
    password: SecretCredential = SecretStr("")
    # TLS to the nodes: their certificates checked against `ssl_cafile` (PEM; empty: the system's
    # trusted CAs) and their host names; for nodes that require client certificates, `ssl_certfile`
    # with its private key `ssl_keyfile` (PEM). The files must exist where a client runs (Spark
    # executors included).
    ssl: bool = False
    ssl_cafile: AbsolutePath = ""
    ssl_certfile: AbsolutePath = ""
    ssl_keyfile: AbsolutePath = ""
    # The local node accepts TLS clients on its port too, requiring a client certificate from the
    # local stack's CA (infra.local_tls), where plain clients keep working: where TLS settings are
    # checked against a real node.
    local_client_tls: bool = True
    # Commit log durability of the local node: "batch" acknowledges a write once it is on disk (no
    # acknowledged realtime row is lost to a power cut); "group" syncs every group window;
    # "periodic" acknowledges at once and syncs every period (up to a period of writes can be lost).
    commitlog_sync: Literal["batch", "group", "periodic"] = "batch"
    commitlog_sync_group_window_ms: int = Field(15, ge=1, le=60_000)
    commitlog_sync_period_ms: int = Field(10_000, ge=1, le=600_000)
    heap_mb: int = Field(768, ge=1, le=2**20)
    health_timeout_s: float = Field(180, gt=0, le=3_600)

    @model_validator(mode="after")
    def _replication_counts(self) -> CassandraSettings:
        bad = {dc: n for dc, n in self.replication.items() if n < 1}
        if bad:
            raise ValueError(f"cassandra.replication: every data centre needs at least 1 copy, got {bad}")
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            raise ValueError(
                "cassandra.ssl_certfile and cassandra.ssl_keyfile go together (a client certificate and its key)"
            )
        if (self.ssl_cafile or self.ssl_certfile) and not self.ssl:
            raise ValueError("cassandra.ssl_cafile / ssl_certfile are TLS settings: set cassandra.ssl = true too")
        names = [dc for dc in self.replication if not DC_NAME.fullmatch(dc) or dc == "class"]
        if names:
            raise ValueError(f"cassandra.replication: {names} are not data centre names (letters, digits, . _ -)")
        if (
            self.local_dc
            and self.replication
            and self.local_dc not in self.replication
            and self.consistency == "LOCAL_QUORUM"
        ):
            # Names are compared as they are: no replica there, and every LOCAL_QUORUM query failed.
            raise ValueError(
                f"cassandra.local_dc {self.local_dc!r} is none of the data centres of cassandra.replication "
                f"({', '.join(self.replication)}): with consistency LOCAL_QUORUM every query would fail"
            )
        return self

    @property
    def replication_map(self) -> dict[str, object]:
        if self.replication:
            return {"class": "NetworkTopologyStrategy", **self.replication}
        return {"class": "SimpleStrategy", "replication_factor": self.replication_factor}
