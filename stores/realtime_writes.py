"""Marks of realtime writes: how a reader knows, with one small read, that no realtime row changed.

Every writer of realtime rows (stores.realtime.RealtimeWriter: the speed layer's tasks, a replay;
stores.realtime_cleanup: deletions) marks each finished write in `realtime_writes`: its writer id
(unique to the writer object) and a number larger than any it marked before. A reader that reads
the marks, then rows, and keeps what it read labelled with those marks, knows the rows can have
changed since exactly when the marks differ: any write that ends after the marks were read is
followed by a mark of a new number. So the serving layer keeps the speed part of answers until the
marks move (serving_layer.speed_cache).

The marks live in one partition, each row with a TTL (a writer that stopped long ago drops out;
its row vanishing only makes a reader read again).

One row is no write of rows: `LATE_DROPS_WRITER`, moved by the speed layer each time it recorded
rows it dropped as later than its watermark (stores.checkpoints.record_late_drops). A reader that
sees it move reads that record at once, rather than at its next read of the checkpoint marker.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

TABLE = "realtime_writes"
SHARD = 0  # every mark in one partition: one read returns them all
MARK_TTL_S = 86_400
LATE_DROPS_WRITER = "late-drops"


def create_statement(keyspace: str, gc_grace_s: int) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {keyspace}.{TABLE} (shard int, writer text, generation bigint, "
        f"PRIMARY KEY ((shard), writer)) WITH default_time_to_live = {MARK_TTL_S} "
        f"AND gc_grace_seconds = {gc_grace_s}"
    )


class WriteMarks:
    """One writer's marks: execute `next_mark()` after every write it finished."""

    def __init__(self, session: Any, role: str) -> None:
        self.writer = f"{role}:{uuid.uuid4().hex}"
        self._last = 0
        self._lock = threading.Lock()
        self._insert = session.prepare(f"INSERT INTO {TABLE} (shard, writer, generation) VALUES ({SHARD}, ?, ?)")

    def next_mark(self) -> tuple[Any, tuple[str, int]]:
        """(statement, parameters) of the next mark: a number larger than any this writer marked."""
        with self._lock:
            self._last = max(time.time_ns() // 1000, self._last + 1)
            return self._insert, (self.writer, self._last)


class MarkReader:
    """Reads every writer's mark, as one comparable value."""

    def __init__(self, session: Any, execution_profile: Any = None) -> None:
        self.session = session
        self.profile = execution_profile
        self._select: Any = None  # prepared at the first read: a reader starts before the table exists

    def read(self) -> frozenset[tuple[str, int]]:
        if self._select is None:
            self._select = self.session.prepare(f"SELECT writer, generation FROM {TABLE} WHERE shard = {SHARD}")
        kwargs = {"execution_profile": self.profile} if self.profile is not None else {}
        return frozenset((row[0], row[1]) for row in self.session.execute(self._select, **kwargs))


def late_drops_mark(marks: object) -> int | None:
    """The late-drops mark among `marks` (MarkReader.read), None when there is none, or when the
    marks are another reader's (an adapter's `generation()` may return any hashable value)."""
    if not isinstance(marks, (set, frozenset)):
        return None
    for mark in marks:
        if isinstance(mark, tuple) and len(mark) == 2 and mark[0] == LATE_DROPS_WRITER and isinstance(mark[1], int):
            return mark[1]
    return None


class LateDropsMarks:
    """The speed layer's driver moves the late-drops mark with `mark()` after each record of late
    drops; it connects at the first one (late drops are rare) and again after a failure."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self._cluster: Any = None
        self._session: Any = None
        self._last = 0

    def mark(self) -> None:
        if self._session is None:
            from stores.clients import cassandra_cluster

            cluster = cassandra_cluster(self.settings, timeout_s=10)
            try:
                self._session = cluster.connect(self.settings.cassandra.keyspace)
            except Exception:
                cluster.shutdown()
                raise
            self._cluster = cluster
        self._last = max(time.time_ns() // 1000, self._last + 1)
        try:
            self._session.execute(
                f"INSERT INTO {TABLE} (shard, writer, generation) VALUES ({SHARD}, %s, %s)",
                (LATE_DROPS_WRITER, self._last),
            )
        except Exception:
            self.close()  # a new connection at the next mark
            raise

    def close(self) -> None:
        cluster, self._cluster, self._session = self._cluster, None, None
        if cluster is not None:
            cluster.shutdown()
