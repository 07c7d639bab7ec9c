"""A Cassandra keyspace of a test's own, made with the platform's schema and dropped afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from stores.clients import cassandra_cluster


@contextlib.contextmanager
def scratch_keyspace(settings, name: str, **cassandra: object) -> Iterator:
    """Settings whose realtime store is keyspace `name` (plus any other `cassandra` settings given),
    with the realtime tables made in it; the keyspace is dropped on the way out."""
    from stores.realtime_schema import ensure_keyspace

    section = settings.cassandra.model_copy(update={"keyspace": name, **cassandra})
    chosen = settings.model_copy(update={"cassandra": section})
    try:
        ensure_keyspace(chosen)
        yield chosen
    finally:
        cluster = cassandra_cluster(settings)
        try:
            cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {name}")
        finally:
            cluster.shutdown()


@contextlib.contextmanager
def scratch_realtime(settings, name: str, **cassandra: object) -> Iterator[tuple]:
    """(writer, reader) of the realtime store in a scratch keyspace `name` (scratch_keyspace)."""
    from stores.realtime import RealtimeReader, RealtimeWriter

    with scratch_keyspace(settings, name, **cassandra) as chosen:
        writer, reader = RealtimeWriter(chosen), RealtimeReader(chosen)
        try:
            yield writer, reader
        finally:
            writer.close()
            reader.close()
