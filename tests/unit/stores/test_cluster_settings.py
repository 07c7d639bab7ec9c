"""Settings that describe clusters reach every client: Kafka brokers and security, HBase Thrift
failover, Cassandra authentication and replication, HDFS name services."""

from __future__ import annotations

import socket

import pytest
from pydantic import ValidationError

from definitions.settings import Settings
from definitions.store_connections import CassandraSettings, HBaseSettings, HdfsSettings, KafkaSettings
from stores.clients import cassandra_cluster, kafka_options, kafka_spark_options, thrift_endpoint

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"


def with_(**sections) -> Settings:
    return Settings().model_copy(update=sections)


def test_kafka_defaults_to_the_local_broker_in_plaintext():
    settings = with_(kafka=KafkaSettings())
    assert kafka_options(settings) == {"bootstrap_servers": ["127.0.0.1:9092"], "security_protocol": "PLAINTEXT"}
    assert kafka_spark_options(settings) == {
        "kafka.bootstrap.servers": "127.0.0.1:9092",
        "kafka.security.protocol": "PLAINTEXT",
    }


def test_kafka_sasl_ssl_reaches_kafka_python_and_spark(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text(PEM)
    kafka = KafkaSettings(
        bootstrap_servers=["b1.example:9093", "b2.example:9093"],
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="lambda",
        sasl_password='p"a\\ss',
        ssl_cafile=str(ca),
    )
    settings = with_(kafka=kafka)
    assert kafka_options(settings) == {
        "bootstrap_servers": ["b1.example:9093", "b2.example:9093"],
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "lambda",
        "sasl_plain_password": 'p"a\\ss',
        "ssl_cafile": str(ca),
    }
    spark = kafka_spark_options(settings)
    assert spark["kafka.bootstrap.servers"] == "b1.example:9093,b2.example:9093"
    assert spark["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert spark["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="lambda" password="p\\"a\\\\ss";'
    )
    # the CA's text travels in the options: executors elsewhere need no file
    assert (spark["kafka.ssl.truststore.type"], spark["kafka.ssl.truststore.certificates"]) == ("PEM", PEM)
    assert not any("keystore" in k for k in spark), "no client certificate was set"


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"security_protocol": "SASL_PLAINTEXT"}, "sasl_username"),
        ({"security_protocol": "SASL_SSL", "sasl_username": "u"}, "sasl_password"),
        ({"bootstrap_servers": ["broker-without-port"]}, "not host:port"),
        ({"bootstrap_servers": ["b:x"]}, "not host:port"),
    ],
)
def test_kafka_settings_that_cannot_connect_are_refused_naming_why(fields, named):
    with pytest.raises(ValidationError, match=named):
        KafkaSettings(**fields)


def test_a_kafka_client_certificate_reaches_kafka_python_and_spark(tmp_path):
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    cert.write_text(PEM)
    key.write_text(KEY)
    kafka = KafkaSettings(security_protocol="SSL", ssl_certfile=str(cert), ssl_keyfile=str(key))
    settings = with_(kafka=kafka)
    options = kafka_options(settings)
    assert (options["ssl_certfile"], options["ssl_keyfile"]) == (str(cert), str(key))
    spark = kafka_spark_options(settings)
    assert spark["kafka.ssl.keystore.type"] == "PEM"
    assert (spark["kafka.ssl.keystore.certificate.chain"], spark["kafka.ssl.keystore.key"]) == (PEM, KEY)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"security_protocol": "SSL", "ssl_certfile": "/c.pem"}, "go together"),
        ({"security_protocol": "SSL", "ssl_keyfile": "/c.key"}, "go together"),
        ({"ssl_certfile": "/c.pem", "ssl_keyfile": "/c.key"}, "needs kafka.security_protocol SSL or SASL_SSL"),
    ],
)
def test_kafka_client_certificate_settings_that_cannot_work_are_refused(fields, message):
    with pytest.raises(ValidationError, match=message):
        KafkaSettings(**fields)


def test_a_kafka_pem_file_that_cannot_be_read_is_named(tmp_path):
    missing = with_(kafka=KafkaSettings(security_protocol="SSL", ssl_cafile=str(tmp_path / "nope.pem")))
    with pytest.raises(ValueError, match=r"kafka.ssl_cafile = .*nope.pem.*No such file"):
        kafka_spark_options(missing)
    text = tmp_path / "text.pem"
    text.write_text("not a certificate")
    with pytest.raises(ValueError, match="kafka.ssl_cafile = .*not a PEM file"):
        kafka_spark_options(with_(kafka=KafkaSettings(security_protocol="SSL", ssl_cafile=str(text))))


def test_hbase_thrift_hosts_parse_with_the_default_port():
    hbase = HBaseSettings(thrift_hosts=["t1.example", "t2.example:9191"], thrift_port=9090)
    assert hbase.thrift_endpoints == [("t1.example", 9090), ("t2.example", 9191)]
    assert HBaseSettings().thrift_endpoints == [("127.0.0.1", 9090)]
    with pytest.raises(ValidationError, match="not host or host:port"):
        HBaseSettings(thrift_hosts=["t1:port"])


def test_a_new_hbase_connection_goes_to_the_first_thrift_server_that_answers():
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead_port = closed.getsockname()[1]
    closed.close()
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        live_port = listening.getsockname()[1]
        settings = with_(hbase=HBaseSettings(thrift_hosts=[f"127.0.0.1:{dead_port}", f"127.0.0.1:{live_port}"]))
        assert thrift_endpoint(settings, timeout_s=2) == ("127.0.0.1", live_port)
    settings = with_(hbase=HBaseSettings(thrift_hosts=[f"127.0.0.1:{dead_port}", f"127.0.0.1:{live_port}"]))
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{dead_port}.*127.0.0.1:{live_port}"):
        thrift_endpoint(settings, timeout_s=2)


def test_cassandra_replication_per_data_centre_and_authentication():
    assert CassandraSettings().replication_map == {"class": "SimpleStrategy", "replication_factor": 1}
    c = CassandraSettings(replication={"dc1": 3, "dc2": 2}, username="lambda", password="secret", local_dc="dc1")
    assert c.replication_map == {"class": "NetworkTopologyStrategy", "dc1": 3, "dc2": 2}
    cluster = cassandra_cluster(with_(cassandra=c))
    assert cluster.auth_provider is not None and cluster.auth_provider.username == "lambda"
    policy = cluster.profile_manager.default.load_balancing_policy
    assert type(policy).__name__ == "TokenAwarePolicy" and policy._child_policy.local_dc == "dc1"
    with pytest.raises(ValidationError, match="at least 1 copy"):
        CassandraSettings(replication={"dc1": 0})


def test_cassandra_reads_and_writes_go_to_a_quorum_of_replicas():
    """With more than one copy, the driver's default (LOCAL_ONE for reads and writes) let a query
    read a replica that had missed an acknowledged write: whole realtime rows missing from an
    answer that said complete. A quorum for both overlaps in at least one replica."""
    from cassandra import ConsistencyLevel

    default = cassandra_cluster(with_(cassandra=CassandraSettings())).profile_manager.default
    assert default.consistency_level == ConsistencyLevel.LOCAL_QUORUM
    every_dc = cassandra_cluster(with_(cassandra=CassandraSettings(consistency="QUORUM"))).profile_manager.default
    assert every_dc.consistency_level == ConsistencyLevel.QUORUM
    with pytest.raises(ValidationError, match="consistency"):
        CassandraSettings(consistency="ONE")


def test_hdfs_name_service_and_webhdfs_failover_urls():
    assert HdfsSettings().url == "hdfs://127.0.0.1:9000"
    h = HdfsSettings(name_service="lambda-ha", webhdfs_urls=["http://nn1:9870/", "http://nn2:9870"])
    assert h.url == "hdfs://lambda-ha"
    assert h.webhdfs_endpoints == ["http://nn1:9870", "http://nn2:9870"]


def test_webhdfs_tries_every_namenode_url():
    from stores.webhdfs import WebHdfs

    settings = with_(hdfs=HdfsSettings(webhdfs_urls=["http://nn1:9870", "http://nn2:9870"]))
    with WebHdfs(settings) as client:
        assert client.client.urls == ["http://nn1:9870", "http://nn2:9870"]


@pytest.mark.parametrize(
    "section, fields, named",
    [
        (KafkaSettings, {"bootstrap_servers": ["b:99999"]}, "not host:port"),
        (CassandraSettings, {"replication": {"dc'1": 3}}, "not data centre names"),
        (CassandraSettings, {"replication": {"class": 3}}, "not data centre names"),
        (HdfsSettings, {"webhdfs_urls": ["nn1:9870"]}, "is not http"),
    ],
)
def test_cluster_settings_that_would_fail_later_are_refused_now(section, fields, named):
    with pytest.raises(ValidationError, match=named):
        section(**fields)


def test_the_local_cluster_settings_are_checked():
    from definitions.spark_settings import SparkClusterSettings
    from definitions.stack_settings import StackSettings

    with pytest.raises(ValidationError, match="exceeds what a worker offers"):
        SparkClusterSettings(workers=1, executor_memory="8g", worker_memory_mb=1024)
    with pytest.raises(ValidationError, match=r"executor_memory\n  String should match pattern"):
        SparkClusterSettings(executor_memory="lots")
    assert SparkClusterSettings(workers=1, executor_memory="1g", worker_memory_mb=1024).workers == 1
    with pytest.raises(ValidationError, match="progress_dir"):
        StackSettings(progress_dir="relative/progress")


def test_a_stored_keyspace_replication_is_compared_with_the_settings_by_class_and_copies():
    from stores.realtime_schema import same_replication

    simple = {"class": "org.apache.cassandra.locator.SimpleStrategy", "replication_factor": "1"}
    assert same_replication(simple, CassandraSettings().replication_map)
    assert not same_replication(simple, CassandraSettings(replication_factor=3).replication_map)
    per_dc = {"class": "org.apache.cassandra.locator.NetworkTopologyStrategy", "dc1": "3", "dc2": "2"}
    assert same_replication(per_dc, CassandraSettings(replication={"dc1": 3, "dc2": 2}).replication_map)
    assert not same_replication(per_dc, CassandraSettings(replication={"dc1": 3}).replication_map)
    assert not same_replication(simple, CassandraSettings(replication={"datacenter1": 1}).replication_map)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"ssl": True, "ssl_certfile": "/c.pem"}, "go together"),
        ({"ssl_cafile": "/ca.pem"}, "set cassandra.ssl = true too"),
    ],
)
def test_cassandra_tls_settings_that_cannot_work_are_refused(fields, message):
    with pytest.raises(ValidationError, match=message):
        CassandraSettings(**fields)


def test_cassandra_tls_checks_the_nodes_and_presents_the_client_certificate(tmp_path):
    import ssl

    from infra.local_tls import make_tls
    from stores.clients import cassandra_ssl_context

    assert cassandra_ssl_context(with_(cassandra=CassandraSettings())) is None, "plain by default"
    tls = make_tls(tmp_path / "tls", ["127.0.0.1"])
    chosen = CassandraSettings(
        ssl=True, ssl_cafile=str(tls.ca), ssl_certfile=str(tls.client_cert), ssl_keyfile=str(tls.client_key)
    )
    context = cassandra_ssl_context(with_(cassandra=chosen))
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    wrong = chosen.model_copy(update={"ssl_keyfile": str(tls.ca)})
    with pytest.raises(ValueError, match="cassandra.ssl_certfile / ssl_keyfile"):
        cassandra_ssl_context(with_(cassandra=wrong))
    missing = CassandraSettings(ssl=True, ssl_cafile=str(tmp_path / "nope.pem"))
    with pytest.raises(ValueError, match="cassandra.ssl_cafile = .*nope.pem"):
        cassandra_ssl_context(with_(cassandra=missing))
