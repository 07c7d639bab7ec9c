"""Settings that describe clusters, against the real local services: lists with a dead member
first fail over to the live one, and a keyspace replicated per data centre serves realtime rows."""

from __future__ import annotations

import socket

from definitions.store_connections import CassandraSettings, HBaseSettings, HdfsSettings, KafkaSettings
from stores.clients import cassandra_cluster, hbase_connection
from stores.kafka import consumer, partition, producer
from stores.webhdfs import WebHdfs
from tests.support.kafka_topics import scratch_topic


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
        send = producer(chosen, f"test-{unique}")
        try:
            sent = send.send(topic, value=f"cluster-settings-{unique}".encode(), partition=0).get(timeout=30)
        finally:
            send.close()
        read = consumer(chosen, f"test-{unique}")
        try:
            tp = partition(topic, 0)
            read.assign([tp])
            read.seek(tp, sent.offset)
            records = read.poll(timeout_ms=10_000, max_records=1).get(tp, [])
            assert records and records[0].value == f"cluster-settings-{unique}".encode()
        finally:
            read.close()


def test_a_keyspace_replicated_per_data_centre_serves_realtime_rows(settings, stack, unique):
    from stores.realtime import RealtimeReader, RealtimeRow, RealtimeWriter, ensure_keyspace

    keyspace = f"test_nts_{unique}"
    c = settings.cassandra
    cassandra = CassandraSettings(
        **{**c.model_dump(), "keyspace": keyspace, "replication": {"datacenter1": 1}, "local_dc": "datacenter1"}
    )
    chosen = settings.model_copy(update={"cassandra": cassandra})
    ensure_keyspace(chosen)
    cluster = cassandra_cluster(settings)
    try:
        session = cluster.connect()
        row = session.execute(
            "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s", (keyspace,)
        ).one()
        assert row.replication["class"].endswith("NetworkTopologyStrategy") and row.replication["datacenter1"] == "1"
        writer, reader = RealtimeWriter(chosen), RealtimeReader(chosen)
        try:
            writer.write([RealtimeRow("page_views", "minute", "/x", 60, 120, 7)], [])
            assert reader.series("page_views", "minute", "/x", [60], 0)[60].value == 7
        finally:
            writer.close()
            reader.close()
    finally:
        cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {keyspace}")
        cluster.shutdown()
