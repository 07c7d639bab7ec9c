"""Settings that describe clusters, against the real local services: lists with a dead member
first fail over to the live one, and a keyspace replicated per data centre serves realtime rows."""

from __future__ import annotations

import socket

from definitions.store_connections import HBaseSettings, HdfsSettings, KafkaSettings
from stores.clients import cassandra_cluster, hbase_connection
from stores.webhdfs import WebHdfs
from tests.support.cassandra_keyspace import scratch_realtime
from tests.support.kafka_topics import round_trip, scratch_topic


def dead_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_hbase_thrift_failover_to_the_server_that_answers(settings, stack):
    h = settings.hbase
    chosen = settings.model_copy(
        update={
            "hbase": HBaseSettings(
                **{**h.model_dump(), "thrift_hosts": [f"127.0.0.1:{dead_port()}", f"{h.host}:{h.thrift_port}"]}
            )
        }
    )
    conn = hbase_connection(chosen, namespaced=False)
    try:
        assert any(t.startswith(f"{h.namespace}:".encode()) for t in conn.tables())
    finally:
        conn.close()


def test_webhdfs_fails_over_to_the_namenode_that_answers(settings, stack):
    h = settings.hdfs
    urls = [f"http://127.0.0.1:{dead_port()}", f"http://{h.host}:{h.http_port}"]
    chosen = settings.model_copy(update={"hdfs": HdfsSettings(**{**h.model_dump(), "webhdfs_urls": urls})})
    with WebHdfs(chosen) as client:
        assert client.status("/")["type"] == "DIRECTORY"


def test_kafka_clients_use_the_whole_broker_list(settings, stack, unique):
    k = settings.kafka
    servers = [f"127.0.0.1:{dead_port()}", k.bootstrap]
    chosen = settings.model_copy(update={"kafka": KafkaSettings(**{**k.model_dump(), "bootstrap_servers": servers})})
    with scratch_topic(settings, f"test-brokers-{unique}") as topic:
        round_trip(chosen, topic, f"cluster-settings-{unique}".encode(), f"test-{unique}", timeout_ms=10_000)


def test_a_keyspace_replicated_per_data_centre_serves_realtime_rows(settings, stack, unique):
    from stores.realtime import RealtimeRow

    keyspace = f"test_nts_{unique}"
    where = {"replication": {"datacenter1": 1}, "local_dc": "datacenter1"}
    with scratch_realtime(settings, keyspace, **where) as (writer, reader):
        cluster = cassandra_cluster(settings)
        try:
            row = (
                cluster.connect()
                .execute("SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s", (keyspace,))
                .one()
            )
        finally:
            cluster.shutdown()
        assert row.replication["class"].endswith("NetworkTopologyStrategy") and row.replication["datacenter1"] == "1"
        writer.write([RealtimeRow("page_views", "minute", "/x", 60, 120, 7)], [])
        assert reader.series("page_views", "minute", "/x", [60], 0)[60].value == 7
