"""Compacting the master dataset: every ingest hour the archiver has finished, rewritten as a few large
files (stores.master_compacted says where, and how a read finds them). The archiver writes up to one
small file per Kafka partition and hour at each trigger: ~35,000 files a day that every batch run
lists and opens.

One command (`lambdactl compact-master`, run daily by the `lambda_housekeeping` DAG; again, twice at
once from one state directory, or after a crash, it does no harm; one from another host is refused
while this one holds the master's lease, stores.master_lease, checked before each step below that
changes the master):

1. plans the hours after the last compacted one that the archiver has finished (its completeness
   marker is past their end, so it writes no more files in them), at most `max_hours` of them;
2. copies their rows (through the file sink's log, or from the folder of every hour holding a file
   the log does not list, however young: stores.master_live's any_age, where a batch run goes by
   the file's age, which a clock far behind misjudges), into a temporary folder, and checks the
   copy holds each hour's rows, hour by hour;
3. moves each hour's folder into `_compacted/`, then moves the marker past them: from that moment a
   read takes those hours from `_compacted/` (a crash before it leaves folders no read looks at, which
   the next compaction replaces);
4. deletes the originals of compacted hours whose records, read from their folders, it counts
   equal to the copy's, unless a batch run may still be reading them under the marker it read when
   it started (they go at the next compaction). Originals holding other rows (a record stamped into
   an hour after the completeness passed it) are kept, and the run fails naming their hours.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from definitions.files import LockHeld, state_lock
from definitions.settings import Settings
from stores import completeness
from stores.master import last_archived, read_days
from stores.master_compacted import (
    HOUR_MS,
    Compacted,
    archived_hours,
    compacted_path,
    day_folders,
    hour_dir,
    read_compacted,
    write_compacted,
)
from stores.master_lease import LeaseHeld, compaction_lease
from stores.master_live import ForeignMasterFiles, in_hours, read_live

log = logging.getLogger("lambda.compaction")

MAX_RECORDS_PER_FILE = 5_000_000  # ~0.2-0.3 GB of Parquet: large files, a few per busy hour


class CompactionRefused(RuntimeError):
    """Compaction cannot run now (the message says why and what to do); nothing was changed."""


class CompactionMismatch(RuntimeError):
    """Compacted hours whose originals hold other committed rows than their copy: a record was stamped
    into an hour after the archiver's completeness had passed it (a broker's clock stepped back). The
    originals are kept; batch runs read the copy, without that record."""

    def __init__(self, result: CompactionResult) -> None:
        self.result = result
        hours = ", ".join(_iso(h) for h in result.mismatched[:5])
        super().__init__(
            f"the originals of compacted hour(s) {hours} hold other records than their compacted copy (a record "
            "stamped into an hour after the archiver's completeness passed it: a broker's clock stepped back; or a "
            "Parquet file the file sink's log does not list, copied in by hand); they are kept, and batch runs read "
            "the copy without those records (docs/operations.md)"
        )


@dataclass
class CompactionResult:
    through_ms: int | None  # every ingest hour before this is compacted (None: none is)
    compacted_hours: list[int] = field(default_factory=list)  # hours compacted by this run (with rows)
    rows: int = 0
    originals_deleted: list[str] = field(default_factory=list)
    originals_kept_for: list[int] = field(default_factory=list)  # batch runs that may read them
    mismatched: list[int] = field(default_factory=list)  # compacted hours whose originals hold other rows
    from_folders: list[int] = field(default_factory=list)  # hours read from their folders (stores.master_live)
    seconds: float = 0.0


def plan(present: Iterable[int], through_ms: int | None, sealed_ms: int, max_hours: int) -> tuple[list[int], int]:
    """(the hours with folders to compact, the marker's new `through_ms`): the hours from the last
    compacted one (or the first archived) up to `sealed_ms` (the start of the first hour the archiver
    has not finished), at most `max_hours` of those that hold folders."""
    hours = sorted(set(present))
    # A first run starts at the first archived hour, or at the first unfinished one if that is earlier:
    # a folder may be an hour ahead of one a partition still writes, which the marker must not pass.
    start = through_ms if through_ms is not None else min(hours[:1] + [sealed_ms])
    todo = [h for h in hours if start <= h < sealed_ms]
    if len(todo) > max_hours:
        todo = todo[:max_hours]
        return todo, todo[-1] + HOUR_MS
    return todo, max(start, sealed_ms)


def readers(runs: Mapping[int, Mapping], may_run, now_ms: int, grace_ms: int) -> list[int]:
    """The batch runs that may be reading the master dataset: recorded "writing" by a process that
    runs (`may_run`: stores.batch_views._may_run), or that cannot be asked (None: another host's)
    and started or beat (batch_layer.heartbeat) within `grace_ms` (batch.retention_grace_s), as
    retention trusts one: a run that died on another host kept every original for weeks."""

    def recent(run: Mapping) -> bool:
        return now_ms - max(run.get("started_ms") or 0, run.get("heartbeat_ms") or 0) < grace_ms

    def may_read(run: Mapping) -> bool:
        running = may_run(run)
        return running is True or (running is None and recent(run))

    return sorted(v for v, run in runs.items() if run.get("state") == "writing" and may_read(run))


def sealed_before(settings: Settings) -> int:
    """The start of the first ingest hour the archiver may still write files in."""
    marker = completeness.latest(settings)
    covered = marker.complete_before_ms if marker is not None else None
    if marker is None or covered is None:
        raise CompactionRefused(
            "the archiver has not published completeness for every partition yet: nothing to compact"
        )
    refusal = completeness.doubt(
        marker, last_archived(settings), int(time.time() * 1000), settings.archiver.completeness_path
    )
    if refusal:
        raise CompactionRefused(refusal)
    return covered - covered % HOUR_MS


def compact_master(settings: Settings, spark=None, max_hours: int = 168, wait: bool = True) -> CompactionResult:
    """Compact the finished ingest hours (see the module's text); the outcome. Another compaction from
    this state directory is waited for, or with `wait` False refused (CompactionRefused): the daily
    DAG's task waiting held Airflow's only task slot for hours, every batch task behind it."""
    from definitions.spark import spark_session

    started = time.monotonic()
    try:
        # Two from one state directory take turns; from two hosts, the second is refused (stores.master_lease).
        with state_lock(settings.state_dir, "master-compaction.lock", "master compaction", log.info, wait=wait):
            with compaction_lease(settings) as lease:
                own = spark is None
                spark = spark or spark_session(settings, "lambda-compaction")
                try:
                    result = _compact(settings, spark, max_hours, lease.check)
                finally:
                    if own:
                        spark.stop()
    except LeaseHeld as exc:
        raise CompactionRefused(str(exc)) from None
    except LockHeld as exc:
        raise CompactionRefused(
            f"another compaction runs from {settings.state_dir} (pid {exc.holder}): run again once it has ended"
        ) from None
    result.seconds = round(time.monotonic() - started, 1)
    return result


def _compact(settings: Settings, spark, max_hours: int, still_leased: Callable[[], None]) -> CompactionResult:
    from stores.webhdfs import WebHdfs

    sealed = sealed_before(settings)
    with WebHdfs(settings) as fs:
        marker = read_compacted(fs, settings)
        present = archived_hours(fs, settings)
        for name in fs.list(compacted_path(settings)):  # a killed compaction's copy, never read
            if name.startswith("_tmp-"):
                fs.delete(f"{compacted_path(settings)}/{name}", recursive=True)
    if marker is not None and sealed < marker.through_ms:
        raise CompactionRefused(
            f"the archiver's completeness ({_iso(sealed)}) is behind the compacted hours ({_iso(marker.through_ms)}): "
            f"the master dataset was rebuilt or restored without {compacted_path(settings)}; remove that folder "
            "with the rest of the old master, or restore them together"
        )
    todo, through = plan(present, marker.through_ms if marker else None, sealed, max_hours)
    gone = _listed_but_gone(settings, spark, present, marker.through_ms if marker else None, through)
    if gone:
        raise CompactionRefused(
            f"the file sink's log lists files of the master dataset that are gone: {', '.join(gone[:5])}"
            + (f" and {len(gone) - 5} more" if len(gone) > 5 else "")
            + "; every batch run fails naming them. Compacted past them, the master would go on without their "
            "records, silently: restore them (nothing was compacted)"
        )
    result = CompactionResult(marker.through_ms if marker else None)
    if marker is None and todo:
        # Before any hour moves in: a compacted hour without a marker fails every read (its originals may be gone).
        still_leased()
        marker = Compacted(todo[0], int(time.time() * 1000))
        with WebHdfs(settings) as fs:
            write_compacted(fs, settings, marker)
        result.through_ms = marker.through_ms
    if todo or marker is None or through > marker.through_ms:
        if todo:
            folders = {h: present[h] for h in todo}
            result.compacted_hours, result.rows, result.from_folders = _copy(
                settings, spark, folders, marker, still_leased
            )
        deleted = marker.deleted_before_ms if marker is not None else 0
        still_leased()
        with WebHdfs(settings) as fs:
            write_compacted(fs, settings, Compacted(through, int(time.time() * 1000), deleted))
        result.through_ms = through
        log.info("master compacted up to %s: %d hour(s), %d rows", _iso(through), len(todo), result.rows)
    if result.through_ms is not None:
        _drop_originals(settings, spark, result, still_leased)
    return result


def _listed_but_gone(
    settings: Settings, spark, present: Mapping[int, str], start: int | None, through: int
) -> list[str]:
    """The files the file sink's log lists in the ingest hours from `start` (None: the first) to
    `through` that the master does not hold (deleted by hand, their hour's folder too): a batch run
    fails on them, and compaction moving its marker past them would leave them out of every read."""
    from urllib.parse import urlparse

    from stores.master import master_url, read_archived
    from stores.master_compacted import hour_of_dir
    from stores.webhdfs import WebHdfs

    listed: dict[int, set[str]] = {}
    for url in read_archived(spark, master_url(settings)).inputFiles():
        path = urlparse(url).path
        parts = path.rsplit("/", 3)
        hour = hour_of_dir(parts[-3], parts[-2]) if len(parts) == 4 else None
        if hour is not None and (start is None or hour >= start) and hour < through:
            listed.setdefault(hour, set()).add(path)
    gone = []
    with WebHdfs(settings) as fs:
        for hour, paths in sorted(listed.items()):
            held = {f"{present[hour]}/{name}" for name in fs.list(present[hour])} if hour in present else set()
            gone += sorted(paths - held)
    return gone


def _copy(
    settings: Settings, spark, hours: Mapping[int, str], marker: Compacted | None, still_leased: Callable[[], None]
) -> tuple[list[int], int, list[int]]:
    """Copy the rows of `hours` (start → the archiver's folder) into `_compacted/`, each hour checked
    whole before it is moved there; (the hours that hold rows, the rows copied, the hours read from
    their folders: _committed)."""
    from stores.webhdfs import WebHdfs

    root = compacted_path(settings)
    tmp = f"{root}/_tmp-{uuid.uuid4().hex[:12]}"
    hdfs = settings.hdfs.url
    try:
        # Every hour holding a file the log does not list is read from its folder, however young the
        # file: which files the log may have forgotten is told by a clock, and on a host whose clock is
        # far behind the archiver's the copy, which every read takes once the marker passes, would lack them.
        try:
            rows, from_folders = _committed(settings, spark, hours, any_age=True)
        except ForeignMasterFiles as exc:  # a file put there by hand: kept, with the hour's originals
            raise CompactionRefused(f"{exc}; then run `lambdactl compact-master` again") from None
        expected = _counts(rows)
        if not expected:  # folders of files no committed batch names: nothing to copy
            return [], 0, []
        rows.repartition("ingest_date", "ingest_hour").write.partitionBy("ingest_date", "ingest_hour").option(
            "maxRecordsPerFile", MAX_RECORDS_PER_FILE
        ).parquet(f"{hdfs}{tmp}")
        with WebHdfs(settings) as fs:
            written = day_folders(fs, tmp)
        copied = _counts(read_days(spark, f"{hdfs}{tmp}", written)) if written else {}
        if copied != expected:
            wrong = sorted(h for h in set(expected) | set(copied) if expected.get(h) != copied.get(h))
            raise RuntimeError(
                f"the compacted copy of hour(s) {', '.join(map(_iso, wrong[:5]))} does not hold their rows "
                f"({[copied.get(h, 0) for h in wrong[:5]]} vs {[expected.get(h, 0) for h in wrong[:5]]}): nothing moved"
            )
        still_leased()
        with WebHdfs(settings) as fs:
            if read_compacted(fs, settings) != marker:
                raise CompactionRefused(
                    f"{root}/_through.json changed while this compaction copied: another one ran (one whose "
                    "lease had lapsed); nothing moved"
                )
            for hour in sorted(expected):
                target = f"{root}/{hour_dir(hour)}"
                day, name = target.rsplit("/", 1)
                # A folder there is a killed compaction's, which no read looks at: moved into this run's
                # copy folder (deleted with it). Deleted, it could be what another compaction committed
                # after taking over from this one paused past its checks: that one swept this run's
                # folder first, so the move fails, and what it committed stays.
                if name in fs.list(day) and not fs.rename(target, f"{tmp}/replaced-{hour}"):
                    raise CompactionRefused(
                        f"{tmp} is gone: another compaction took over (this one's lease had lapsed); nothing moved"
                    )
                fs.mkdirs(day)
                if not fs.rename(f"{tmp}/{hour_dir(hour)}", target):
                    raise RuntimeError(f"could not move the compacted hour into {target}: nothing is read from it yet")
        return sorted(expected), sum(expected.values()), from_folders
    finally:
        with WebHdfs(settings) as fs:
            fs.delete(tmp, recursive=True)


def _committed(settings: Settings, spark, hours: Mapping[int, str], every: bool = False, any_age: bool = False):
    """(the committed rows of the ingest hours `hours` (start → the archiver's folder), the hours
    among them read from their folders): stores.master_live.read_live, so also of hours the file
    sink's log may have forgotten files of (with `any_age`, of every hour holding a file it does not
    list); with `every`, every hour read from its folder, whatever the log lists."""
    from stores.webhdfs import WebHdfs

    with WebHdfs(settings) as fs:
        rows, whole = read_live(spark, settings, fs, hours, every, any_age)
    # These hours only: of an hour between them whose originals are gone, the log still lists files,
    # and reading them failed every later compaction (FileNotFound) after one hour was kept.
    return rows.where(in_hours(hours)), whole


def _counts(frame) -> dict[int, int]:
    """Rows per ingest hour (its start, epoch ms)."""
    from stores.master_compacted import hour_of_dir

    out = {}
    for row in frame.groupBy("ingest_date", "ingest_hour").count().collect():
        hour = hour_of_dir(f"ingest_date={row['ingest_date'].isoformat()}", f"ingest_hour={row['ingest_hour']}")
        assert hour is not None
        out[hour] = row["count"]
    return out


def _drop_originals(settings: Settings, spark, result: CompactionResult, still_leased: Callable[[], None]) -> None:
    """Delete the archiver's folders of compacted hours whose committed rows the compacted copy holds
    (a record stamped into an hour after it was compacted keeps them, CompactionMismatch), unless a
    batch run may still read them."""
    from stores.batch_views import _may_run
    from stores.registry import version_store
    from stores.webhdfs import WebHdfs

    with WebHdfs(settings) as fs:
        marker = read_compacted(fs, settings)
        assert marker is not None
        old = {h: path for h, path in archived_hours(fs, settings).items() if h < marker.through_ms}
        days = day_folders(fs, compacted_path(settings))
        if not old:
            if marker.deleted_before_ms < marker.through_ms:
                still_leased()
                write_compacted(fs, settings, Compacted(marker.through_ms, marker.compacted_ms, marker.through_ms))
            return
    grace_ms = settings.batch.retention_grace_s * 1000
    result.originals_kept_for = readers(version_store(settings).runs(), _may_run, int(time.time() * 1000), grace_ms)
    if result.originals_kept_for:
        log.info(
            "the originals of %d compacted hour(s) are kept: batch run(s) %s may be reading them (the next "
            "compaction deletes them)",
            len(old),
            ", ".join(map(str, result.originals_kept_for)),
        )
        return
    # An hour whose originals went already: its folder is back with records stamped into it since.
    result.mismatched = sorted(h for h in old if h < marker.deleted_before_ms)
    pending = sorted(h for h in old if h >= marker.deleted_before_ms)
    with WebHdfs(settings) as fs:  # what is counted below: a folder holding anything else then is kept
        counted = {h: _entries(fs, path) for h, path in old.items()}
    if pending:
        span = in_hours(pending)
        # Read from the folders, not through the log: every record any complete original holds must be in the copy.
        try:
            committed = _counts(_committed(settings, spark, {h: old[h] for h in pending}, every=True)[0])
        except ForeignMasterFiles as exc:  # copied in by hand since the hour was compacted: every original kept
            log.error("%s", exc)
            result.mismatched += pending
        else:
            copies = f"{settings.hdfs.url}{compacted_path(settings)}"
            held = _counts(read_days(spark, copies, days).where(span)) if days else {}
            result.mismatched += [h for h in pending if committed.get(h, 0) != held.get(h, 0)]
    still_leased()
    with WebHdfs(settings) as fs:
        for hour, path in sorted(old.items()):
            if hour in result.mismatched:
                continue
            if _entries(fs, path) != counted[hour]:  # a record stamped into it while it was counted
                result.mismatched.append(hour)
                continue
            fs.delete(path, recursive=True)
            result.originals_deleted.append(path)
        root = settings.archiver.master_path
        for day in {path.rsplit("/", 2)[1] for path in result.originals_deleted}:
            fs.delete_if_empty(f"{root}/{day}")  # the archiver may be opening the day's next hour in it
        if not result.mismatched and marker.deleted_before_ms < marker.through_ms:
            write_compacted(fs, settings, Compacted(marker.through_ms, marker.compacted_ms, marker.through_ms))
    if result.mismatched:
        raise CompactionMismatch(result)


def _entries(fs, path: str) -> set[tuple[str, int, int]]:
    """A folder's entries as (name, modification time, size), to tell whether it changed."""
    return set(fs.versions(path))


def _iso(ms: int) -> str:
    from definitions.times import iso_ms

    return iso_ms(ms)
