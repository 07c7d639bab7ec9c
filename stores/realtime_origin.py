"""Which start of the speed layer the realtime store's rows come from: one row, written at a fresh
start (after the tables were emptied, before the marker), holding that start's time — the marker's
`started_ms` (stores.checkpoints).

A resumed checkpoint writes again only the groups its next micro-batches touch: the rows of every
other group must be in the store already. When they are not — a node's data removed, the keyspace
dropped, `cassandra.keyspace` or `cassandra.hosts` pointing elsewhere — answers are short, and
labelled complete, until a batch run absorbs their buckets. The start compares this row with the
marker and refuses to resume when they differ (speed_layer.checkpoint_start).

The row has no TTL. A fresh start writes it, and so does the start that resumes a marker which does
not say the store records it (one written before it did): for the rows the store holds then.
"""

from __future__ import annotations

from definitions.settings import Settings
from stores.clients import cassandra_cluster

TABLE = "realtime_origin"
_ROW = "speed-layer"


def create_statement(keyspace: str) -> str:
    return f"CREATE TABLE IF NOT EXISTS {keyspace}.{TABLE} (name text PRIMARY KEY, started_ms bigint)"


def write_origin(settings: Settings, started_ms: int) -> None:
    """Record that the store's rows come from the speed layer's start at `started_ms`. RuntimeError
    when the record read back is another (an earlier write stamped by a clock ahead of this host's
    wins Cassandra's last-write-wins): the next resume would be refused, so this start is."""
    ks = settings.cassandra.keyspace
    cluster = cassandra_cluster(settings, timeout_s=30)
    try:
        session = cluster.connect()
        session.execute(create_statement(ks))
        session.execute(f"INSERT INTO {ks}.{TABLE} (name, started_ms) VALUES (%s, %s)", (_ROW, started_ms))
        row = session.execute(f"SELECT started_ms FROM {ks}.{TABLE} WHERE name = %s", (_ROW,)).one()
    finally:
        cluster.shutdown()
    if row is None or int(row.started_ms) != started_ms:
        raise RuntimeError(
            f"the realtime store's record of the speed layer start its rows come from ({ks}.{TABLE}) still says "
            f"{'nothing' if row is None else row.started_ms} after it was written {started_ms}: an earlier write "
            "carries a later timestamp (a clock ahead of this host's); check the hosts' clocks"
        )


def read_origin(settings: Settings) -> int | None:
    """The start the store's rows come from (ms); None when the store holds no such record (no table,
    or no row). Raises what the driver raises when the store cannot be read."""
    ks = settings.cassandra.keyspace
    cluster = cassandra_cluster(settings, timeout_s=30)
    try:
        session = cluster.connect()
        tables = session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s AND table_name = %s", (ks, TABLE)
        ).one()
        if tables is None:
            return None
        row = session.execute(f"SELECT started_ms FROM {ks}.{TABLE} WHERE name = %s", (_ROW,)).one()
        return None if row is None else int(row.started_ms)
    finally:
        cluster.shutdown()
