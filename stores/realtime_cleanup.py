"""Deleting the realtime rows that the serving batch tables have absorbed.

Every view is served from its own batch table with its own cutoff, and the merge never reads a
view's realtime rows of ingest buckets below that view's cutoff; every row expires by TTL anyway:
deleting them after a batch swap only keeps the tables small. So the clean-up must never be a
reason for a batch run to fail. It is given a cutoff per view (a view without one keeps every row)
and reads the rows below the highest of them token range by token range
(stores/realtime_scan.py), keeps those below their own view's cutoff, issues one range deletion
per (view key, event bucket) in `realtime_by_key` and per event bucket in `realtime_by_bucket`,
and reports what it could not read (for instance a range holding more tombstones than Cassandra
will scan) instead of stopping: rows there stay until their TTL, unread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from definitions.settings import Settings
from definitions.times import iso_ms
from stores.clients import cassandra_cluster
from stores.realtime_scan import MAX_TOKEN, MIN_TOKEN, ScanError, Unreadable, scan
from stores.realtime_schema import BY_BUCKET, BY_KEY, TABLES
from stores.realtime_statements import execute_with_retries
from stores.realtime_writes import WriteMarks

log = logging.getLogger(__name__)

# table → (partition key, clustering columns a deletion names before `ingest_bucket < cutoff`)
TARGETS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    name: (TABLES[name].partition_key, TABLES[name].before("ingest_bucket")) for name in (BY_KEY, BY_BUCKET)
}


@dataclass
class Cleanup:
    cutoff_s: int  # the smallest cutoff deleted below (delete_view_from: the first bucket deleted)
    cutoffs: dict[str, int] | None = None  # per view; None: every view below cutoff_s
    rows_below_cutoff: int = 0  # delete_view_from: the rows found from its bucket on
    deletions: int = 0
    unreadable: list[Unreadable] = field(default_factory=list)
    views_seen: set[str] = field(default_factory=set)  # the storage names of every row the scan read
    as_of_us: int | None = None  # the deletions' timestamp: rows written after it were counted but survive

    @property
    def complete(self) -> bool:
        return not self.unreadable

    def summary(self) -> str:
        text = f"{self.rows_below_cutoff:,} realtime rows below the cutoff, {self.deletions:,} range deletions issued"
        if self.as_of_us is not None:
            text += f" as of {iso_ms(self.as_of_us // 1000)} (rows written after it were counted and stay)"
        if self.unreadable:
            text += (
                f"; {len(self.unreadable)} token range(s) could not be read and were left "
                f"(never read below the cutoff, they expire by TTL): "
                + "; ".join(u.describe() for u in self.unreadable[:5])
            )
        return text


def delete_absorbed(settings: Settings, cutoffs: int | Mapping[str, int], timestamp_us: int | None = None) -> Cleanup:
    """Delete realtime rows of ingest buckets below their view's cutoff (seconds): `cutoffs` maps a
    view to the cutoff of the batch table serving it; an int is one cutoff for every view. Only
    call with cutoffs the serving batch tables cover. `timestamp_us`: only rows written before it
    (a row written later survives the deletion)."""
    per_view: dict[str, int] | None
    if isinstance(cutoffs, Mapping):
        per_view = dict(cutoffs)
        top, lowest = max(per_view.values(), default=0), min(per_view.values(), default=0)
    else:
        per_view = None
        top = lowest = int(cutoffs)
    result = Cleanup(lowest, per_view, as_of_us=timestamp_us)
    if top <= 0:
        return result
    cutoff_of = (lambda row: top) if per_view is None else (lambda row: per_view.get(row.view_name, -1))
    _range_deletions(
        settings,
        result,
        "ingest_bucket < ?",
        "ingest_bucket < ?",
        (top,),
        keep=lambda row: row.ingest_bucket < cutoff_of(row),
        bound=cutoff_of,
        timestamp_us=timestamp_us,
    )
    where = f"{top}" if per_view is None else ", ".join(f"{v} {c}" for v, c in sorted(per_view.items()))
    (log.info if result.complete else log.warning)("realtime clean-up below %s: %s", where, result.summary())
    return result


def delete_view_from(settings: Settings, view: str, from_s: int, timestamp_us: int) -> Cleanup:
    """Delete `view`'s realtime rows of ingest buckets at or after `from_s`, as of `timestamp_us`
    (a write with a later timestamp, such as the replay's or the running speed layer's, survives the
    deletion whenever it reaches the store). For `lambdactl replay`, which then rewrites them."""
    result = Cleanup(from_s, {view: from_s}, as_of_us=timestamp_us)
    _range_deletions(
        settings,
        result,
        "ingest_bucket >= ?",
        "view_name = ? AND ingest_bucket >= ?",
        (view, from_s),
        keep=lambda row: True,
        bound=lambda row: from_s,
        timestamp_us=timestamp_us,
    )
    (log.info if result.complete else log.warning)(
        "realtime rows of %s from ingest bucket %s: %d rows, %d range deletions%s",
        view,
        from_s,
        result.rows_below_cutoff,
        result.deletions,
        f"; {len(result.unreadable)} token range(s) could not be read" if result.unreadable else "",
    )
    return result


def _mark(session: Any, marks: WriteMarks) -> None:
    statement, params = marks.next_mark()
    execute_with_retries(session, statement, [params], concurrency=1, give_up_after_s=60, what="deletion marks")


def _range_deletions(
    settings: Settings,
    result: Cleanup,
    condition: str,
    where: str,
    params: tuple,
    keep: Callable[[Any], bool],
    bound: Callable[[Any], int],
    timestamp_us: int | None = None,
) -> None:
    """Scan both realtime tables (`where`, `params`), and for the rows `keep` says, issue one range
    deletion `condition` (its `?` being `bound(row)`) per (partition key, clustering before the ingest
    bucket); as of `timestamp_us` when given. Counts and unreadable ranges go into `result`. Marks
    the deletions (stores.realtime_writes) once issued, so readers keeping rows read them again."""
    cluster = cassandra_cluster(settings, timeout_s=30)
    try:
        session = cluster.connect(settings.cassandra.keyspace)
        marks = WriteMarks(session, "deletions")
        issued = False  # deletions were sent: a pass that fails part-way marks them too
        try:
            for table, (partition_key, clustering) in TARGETS.items():
                names = partition_key + clustering
                delete = session.prepare(
                    f"DELETE FROM {table}{' USING TIMESTAMP ?' if timestamp_us is not None else ''} WHERE "
                    + " AND ".join(f"{c} = ?" for c in names)
                    + f" AND {condition}"
                )
                stamp = () if timestamp_us is None else (timestamp_us,)
                columns = ", ".join(dict.fromkeys(("view_name", *names, "ingest_bucket")))
                try:
                    for rows in scan(
                        session, table, partition_key, columns, where, params, unreadable=result.unreadable
                    ):
                        result.views_seen.update(row.view_name for row in rows)
                        kept = [row for row in rows if keep(row)]
                        targets = {tuple(getattr(row, c) for c in names): bound(row) for row in kept}
                        issued = issued or bool(targets)
                        execute_with_retries(
                            session,
                            delete,
                            [(*stamp, *t, b) for t, b in targets.items()],
                            concurrency=32,
                            give_up_after_s=60,
                            what=f"{table} deletions",
                        )
                        result.rows_below_cutoff += len(kept)
                        result.deletions += len(targets)
                except (ScanError, RuntimeError) as exc:  # too many ranges unreadable, deletions refused
                    # What is left of the table stays until its TTL, never read: reported, not raised.
                    result.unreadable.append(Unreadable(table, MIN_TOKEN, MAX_TOKEN, f"{type(exc).__name__}: {exc}"))
        except BaseException:
            if issued:
                try:
                    _mark(session, marks)
                except Exception as exc:  # noqa: BLE001 - the failure of the pass is what is raised
                    log.warning("the deletions sent before a failure could not be marked: %s", exc)
            raise
        if issued:
            _mark(session, marks)
    finally:
        cluster.shutdown()
