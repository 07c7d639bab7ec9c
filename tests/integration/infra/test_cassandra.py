"""Cassandra through cassandra-driver, the way the speed layer writes realtime views."""

from __future__ import annotations

from cassandra.concurrent import execute_concurrent_with_args

from stores.clients import cassandra_cluster


def test_prepared_insert_and_select(settings, stack, unique):
    cluster = cassandra_cluster(settings)
    session = cluster.connect(settings.cassandra.keyspace)
    table = f"test_{unique}"
    try:
        session.execute(f"CREATE TABLE {table} (url text, bucket bigint, count bigint, PRIMARY KEY ((url), bucket))")
        insert = session.prepare(f"INSERT INTO {table} (url, bucket, count) VALUES (?, ?, ?)")
        params = [(f"/p/{i % 4}", i, i * 10) for i in range(200)]
        results = execute_concurrent_with_args(session, insert, params, concurrency=32)
        assert all(ok for ok, _ in results)
        rows = session.execute(f"SELECT bucket, count FROM {table} WHERE url = %s AND bucket >= %s", ("/p/1", 100))
        got = [(r.bucket, r.count) for r in rows]
        assert got == [(b, b * 10) for b in range(101, 200, 4)]
    finally:
        session.execute(f"DROP TABLE IF EXISTS {table}")
        cluster.shutdown()


def test_platform_keyspace_exists(settings, stack):
    cluster = cassandra_cluster(settings)
    try:
        cluster.connect()
        assert settings.cassandra.keyspace in cluster.metadata.keyspaces
    finally:
        cluster.shutdown()
