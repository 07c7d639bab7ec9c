"""Cassandra through cassandra-driver, the way the speed layer writes realtime views."""

from __future__ import annotations

from cassandra.concurrent import execute_concurrent_with_args

from stores.clients import cassandra_cluster
from tests.support.cassandra_keyspace import scratch_keyspace, scratch_realtime


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


def test_realtime_rows_written_in_replica_batches_read_back_exactly(settings, stack, unique):
    """RealtimeWriter sends unlogged batches (speed.write_batch_bytes): every row lands, sketches
    included, and writing new absolute values over them replaces them. Top rows' keys are JSON arrays,
    as the speed layer writes them (key_text): the reader refuses any other key."""
    import random

    from definitions.views import key_text
    from stores.realtime import RealtimeRow

    small = settings.model_copy(update={"speed": settings.speed.model_copy(update={"write_batch_bytes": 5_120})})
    r = random.Random(3)
    with scratch_realtime(small, f"test_{unique}") as (writer, reader):
        for round_ in range(2):  # the second round overwrites every row with other values
            by_key = [
                RealtimeRow(
                    "unique_visitors",
                    "minute",
                    f"/p{k}",
                    60 * b,
                    60 * b + 60,
                    r.randrange(10**6),
                    bytes([k % 256]) * (k % 900),
                )
                for k in range(300)
                for b in range(4)
            ]
            by_bucket = [
                RealtimeRow("top_pages", "minute", key_text([f"/p{k}"]), 60 * b, 60 * b + 60, r.randrange(10**6))
                for k in range(400)
                for b in range(3)
            ]
            writer.write(by_key, by_bucket)
            for k in range(300):
                got = reader.series(
                    "unique_visitors", "minute", f"/p{k}", [60 * b for b in range(4)], 0, with_sketches=True
                )
                want = {row.event_bucket: row for row in by_key if row.key == f"/p{k}"}
                assert {b: (c.value, c.sketches) for b, c in got.items()} == {
                    b: (row.value, [row.sketch]) for b, row in want.items()
                }, f"round {round_}, key /p{k}"
            buckets = reader.bucket("top_pages", "minute", [0, 60, 120], 0)
            assert buckets == {
                60 * b: {row.key: row.value for row in by_bucket if row.event_bucket == 60 * b} for b in range(3)
            }


def test_a_late_write_of_an_older_micro_batch_never_replaces_a_newer_value(settings, stack, unique):
    """Rows carry their micro-batch's write timestamp: a retry of batch N landing after batch N+1
    (a slow executor, another machine's clock) leaves N+1's value in place."""
    from stores.realtime import RealtimeRow

    with scratch_realtime(settings, f"test_{unique}") as (writer, reader):
        newer, older = 1_800_000_000_000_001, 1_800_000_000_000_000
        writer.write([RealtimeRow("page_views", "minute", "/t", 60, 120, 12)], [], newer)
        writer.write([RealtimeRow("page_views", "minute", "/t", 60, 120, 10)], [], older)
        assert reader.series("page_views", "minute", "/t", [60], 0)[60].value == 12
        writer.write([RealtimeRow("page_views", "minute", "/t", 60, 120, 15)], [], newer + 1)
        assert reader.series("page_views", "minute", "/t", [60], 0)[60].value == 15


def test_a_replication_change_in_settings_is_applied_to_the_existing_keyspace(settings, stack, unique):
    """Bootstrapping again with other replication settings alters the keyspace (it is not left as it
    was first made); bootstrapping with the same ones changes nothing."""
    from stores.realtime_schema import ensure_keyspace

    def replication(chosen) -> dict:
        cluster = cassandra_cluster(chosen)
        try:
            row = (
                cluster.connect()
                .execute(
                    "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s",
                    (chosen.cassandra.keyspace,),
                )
                .one()
            )
            return dict(row.replication)
        finally:
            cluster.shutdown()

    with scratch_keyspace(settings, f"repl_{unique}") as chosen:
        assert replication(chosen)["class"].endswith("SimpleStrategy")
        local_dc = stack_data_centre(chosen)
        moved = chosen.model_copy(
            update={"cassandra": chosen.cassandra.model_copy(update={"replication": {local_dc: 1}})}
        )
        ensure_keyspace(moved)
        after = replication(moved)
        assert after["class"].endswith("NetworkTopologyStrategy") and after[local_dc] == "1", after
        ensure_keyspace(moved)  # again: already in line
        assert replication(moved) == after


def stack_data_centre(settings) -> str:
    cluster = cassandra_cluster(settings)
    try:
        return cluster.connect().execute("SELECT data_center FROM system.local").one().data_center
    finally:
        cluster.shutdown()
