"""The realtime store's record of the speed layer start its rows come from (stores.realtime_origin),
on the real Cassandra: none in a keyspace that does not exist or was never written by a start, the
start written, and a later fresh start's replacing it."""

from __future__ import annotations

from stores import realtime_origin


def test_the_store_records_the_start_its_rows_come_from_on_the_real_cassandra(settings, stack, unique):
    from stores.clients import cassandra_cluster
    from stores.realtime_schema import ensure_keyspace

    def keyspace(name: str):
        return settings.model_copy(update={"cassandra": settings.cassandra.model_copy(update={"keyspace": name})})

    mine, elsewhere = keyspace(f"origin_{unique}"), keyspace(f"nowhere_{unique}")
    assert realtime_origin.read_origin(elsewhere) is None, "a keyspace that does not exist holds no rows of a start"
    ensure_keyspace(mine)
    try:
        assert realtime_origin.read_origin(mine) is None, "tables, and no start recorded"
        realtime_origin.write_origin(mine, 1_000)
        assert realtime_origin.read_origin(mine) == 1_000
        realtime_origin.write_origin(mine, 2_000)  # a fresh start later
        assert realtime_origin.read_origin(mine) == 2_000
        assert realtime_origin.read_origin(elsewhere) is None
    finally:
        cluster = cassandra_cluster(mine, timeout_s=60)
        try:
            cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {mine.cassandra.keyspace}")
        finally:
            cluster.shutdown()
