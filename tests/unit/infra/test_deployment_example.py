"""The example settings file of docs/deployment.md loads, and says what the page says it does."""

from __future__ import annotations

import re
from pathlib import Path

from definitions.settings import Settings
from stores.clients import kafka_options, kafka_spark_options

PAGE = Path(__file__).resolve().parents[3] / "docs" / "deployment.md"


def test_the_deployment_example_loads_with_the_secrets_from_the_environment(tmp_path, monkeypatch):
    [example] = re.findall(r"```toml\n(.*?)```", PAGE.read_text(), flags=re.S)
    config = tmp_path / "lambda.toml"
    # The certificate files it names, made under tmp_path (the clients read them when they connect).
    for name in set(re.findall(r'"/etc/lambda/([^"]+)"', example)):
        kind = "PRIVATE KEY" if name.endswith(".key") else "CERTIFICATE"
        (tmp_path / name).write_text(f"-----BEGIN {kind}-----\nMIIB\n-----END {kind}-----\n")
    example = example.replace('"/etc/lambda/', f'"{tmp_path}/')
    config.write_text(example.replace('"/var/lib/lambda"', f'"{tmp_path / "state"}"'))
    monkeypatch.setenv("LAMBDA_CONFIG", str(config))
    monkeypatch.setenv("LAMBDA_KAFKA__SASL_PASSWORD", "kafka-secret")
    monkeypatch.setenv("LAMBDA_CASSANDRA__PASSWORD", "cassandra-secret")
    for name in ("LAMBDA_ENVIRONMENT", "LAMBDA_SPARK__CLUSTER__WORKERS"):
        monkeypatch.delenv(name, raising=False)
    s = Settings()
    assert s.environment == "production"
    assert s.stack.managed_services == ["archiver", "speed-layer", "api"]
    assert kafka_options(s)["bootstrap_servers"][2] == "kafka-3.internal:9093"
    assert kafka_options(s)["sasl_plain_password"] == "kafka-secret"
    assert 'password="kafka-secret"' in kafka_spark_options(s)["kafka.sasl.jaas.config"]
    assert (s.kafka.partitions, s.kafka.replication_factor) == (12, 3)
    assert s.hdfs.url == "hdfs://lambda-ha" and len(s.hdfs.webhdfs_endpoints) == 2
    assert s.hbase.thrift_endpoints == [("hbase-thrift-1.internal", 9090), ("hbase-thrift-2.internal", 9090)]
    assert s.cassandra.replication_map == {"class": "NetworkTopologyStrategy", "dc1": 3, "dc2": 3}
    assert s.cassandra.password.get_secret_value() == "cassandra-secret"
    assert kafka_spark_options(s)["kafka.ssl.keystore.key"].startswith("-----BEGIN PRIVATE KEY-----")
    assert s.cassandra.ssl and s.cassandra.ssl_certfile.endswith("cassandra-client.pem")
    assert (s.spark.master, s.spark.python, s.spark.cluster.workers) == (
        "spark://spark-master.internal:7077",
        "/opt/lambda/venv/bin/python",
        0,
    )
    assert s.spark.conf["spark.hadoop.dfs.nameservices"] == "lambda-ha"
