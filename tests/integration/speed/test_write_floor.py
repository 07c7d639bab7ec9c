"""What the realtime store says its rows were stamped at or below (stores.registry.written_floor_us),
on the real Cassandra: the largest number its writers marked, which the speed layer's timestamps
start past after a restart."""

from __future__ import annotations

from stores.registry import written_floor_us


def test_the_floor_is_past_every_mark_written_on_the_real_cassandra(settings, stack, unique):
    from stores.clients import cassandra_cluster
    from stores.realtime_schema import ensure_keyspace
    from stores.realtime_writes import WriteMarks

    mine = settings.model_copy(
        update={"cassandra": settings.cassandra.model_copy(update={"keyspace": f"floor_{unique}"})}
    )
    ensure_keyspace(mine)
    cluster = cassandra_cluster(mine, timeout_s=60)
    session = cluster.connect(mine.cassandra.keyspace)
    try:
        assert written_floor_us(mine) == 0, "no writer marked anything"
        marks = WriteMarks(session, "speed")
        marks._last = 10**17  # a writer whose clock ran far ahead
        statement, params = marks.next_mark()
        session.execute(statement, params)
        other = WriteMarks(session, "cleanup")
        session.execute(*other.next_mark())
        assert written_floor_us(mine) == params[1]
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {mine.cassandra.keyspace}")
        cluster.shutdown()
