"""Deleting the realtime rows that the serving batch version has absorbed.

The merge never reads realtime rows of ingest buckets below the serving cutoff, and every row
expires by TTL anyway: deleting them after a batch swap only keeps the tables small. So the
clean-up must never be a reason for a batch run to fail. It reads the rows below the cutoff token
range by token range (speed_layer/token_scan.py), issues one range deletion per (view key, event
bucket) in `realtime_by_key` and per event bucket in `realtime_by_bucket`, and reports what it
could not read (for instance a range holding more tombstones than Cassandra will scan) instead of
stopping: rows there stay until their TTL, unread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from definitions.clients import cassandra_cluster
from definitions.settings import Settings
from speed_layer.realtime_store import BY_BUCKET, BY_KEY, execute_with_retries
from speed_layer.token_scan import Unreadable, scan

log = logging.getLogger(__name__)

# table → (partition key, clustering columns a deletion names before `ingest_bucket < cutoff`)
TARGETS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    BY_KEY: (("view_name", "granularity", "key"), ("event_bucket",)),
    BY_BUCKET: (("view_name", "granularity", "event_bucket"), ()),
}


@dataclass
class Cleanup:
    cutoff_s: int
    rows_below_cutoff: int = 0
    deletions: int = 0
    unreadable: list[Unreadable] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.unreadable

    def summary(self) -> str:
        text = (f"{self.rows_below_cutoff:,} realtime rows below the cutoff, "
                f"{self.deletions:,} range deletions issued")
        if self.unreadable:
            text += (f"; {len(self.unreadable)} token range(s) could not be read and were left "
                     f"(never read below the cutoff, they expire by TTL): "
                     + "; ".join(u.describe() for u in self.unreadable[:5]))
        return text


def delete_absorbed(settings: Settings, cutoff_s: int) -> Cleanup:
    """Delete realtime rows of ingest buckets below `cutoff_s`. Only call after the batch swap to a
    version whose cutoff is at least `cutoff_s`."""
    result = Cleanup(cutoff_s)
    cluster = cassandra_cluster(settings, timeout_s=30)
    try:
        session = cluster.connect(settings.cassandra.keyspace)
        for table, (partition_key, clustering) in TARGETS.items():
            names = partition_key + clustering
            delete = session.prepare(
                f"DELETE FROM {table} WHERE " + " AND ".join(f"{c} = ?" for c in names) + " AND ingest_bucket < ?")
            for rows in scan(session, table, partition_key, ", ".join(names), "ingest_bucket < ?", (cutoff_s,),
                             unreadable=result.unreadable):
                targets = {tuple(getattr(row, c) for c in names) for row in rows}
                execute_with_retries(session, delete, [(*t, cutoff_s) for t in targets], concurrency=32, give_up_after_s=60,
                                     what=f"{table} deletions")
                result.rows_below_cutoff += len(rows)
                result.deletions += len(targets)
    finally:
        cluster.shutdown()
    (log.info if result.complete else log.warning)("realtime clean-up below %d: %s", cutoff_s, result.summary())
    return result
