"""The batch layer: recompute every declared view exactly from the master dataset, below a cutoff.

1. Cutoff T: the last ingest-bucket boundary the archiver's completeness marker covers (or the
   one asked for, refused if not covered). T never goes backwards.
2. Read the master dataset for ingest_time < T, keep one copy of each event_id (the first
   archived), compute every view at every granularity from its declaration.
3. Write each view into new HBase tables for version N (HFiles loaded whole, stores/batch_bulk_load;
   or with batch.load = "puts" batched puts from the Spark tasks), verify them against the
   computation (row count and value checksum per table),
4. then move the pointer entries of the views it recomputed (table, version, cutoff, run id,
   stats) with one compare-and-set; a move since step 1 that changed what the run planned against
   (its views' entries, an alias, one of its views marked retiring; any entry for a full run)
   makes it fail, changing nothing — and apply retention.

Run: `lambdactl batch` or `spark-submit batch_layer/job.py [--cutoff ISO] [--views a,b] [--force]`.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime

import psutil

from batch_layer.heartbeat import beat_every_s, heartbeat
from batch_layer.swap import beat_verified, not_past_grace, retain_before_writing, swap_version, tables_kept
from batch_layer.tables import write_tables
from definitions.files import boot_id, start_ticks
from definitions.logs import bind, configure_from
from definitions.settings import Settings, process_settings
from definitions.spark import batch_session_options
from definitions.times import iso_ms as iso
from definitions.times import parse_iso_ms
from definitions.views import View, read_columns, view_names
from stores import batch_bulk_load, checkpoints, completeness
from stores import batch_layout as layout
from stores.batch_views import Pointer
from stores.batch_writer import (
    TableStats,
    VerificationError,
    missing_tables,
    verify_table,
)
from stores.master import first_copies, last_archived, read_master
from stores.pointer import CutoffError, NotCoveredYet, Overtaken, PointerMoved
from stores.pointer_moves import behind, run_basis
from stores.registry import version_store

log = logging.getLogger("lambda.batch")


@dataclass
class BatchResult:
    version: int | None
    cutoff_ms: int
    run_id: str
    skipped: str = ""
    tables: dict[str, TableStats] = field(default_factory=dict)
    events: int = 0
    seconds: float = 0.0


def choose_cutoff(
    settings: Settings, requested_ms: int | None, current: Pointer | None, views: list[str] | None = None
) -> int:
    """The cutoff of a run of `views` (default: every view the pointer names): aligned to an ingest
    bucket, covered by the completeness marker, and not behind the cutoff any of them serves at."""
    speed = checkpoints.read_marker(settings)
    if speed is not None and speed.ingest_bucket_s != settings.ingest_bucket_s:
        # A cutoff off the speed layer's grid would split one of its ingest buckets between the
        # layers: the serving layer would refuse the version (503) instead of answering.
        raise CutoffError(
            f"the speed layer keys realtime rows by {speed.ingest_bucket_s}s ingest buckets, this run's "
            f"settings say ingest_bucket_s={settings.ingest_bucket_s}: run with the stack's persisted "
            "settings (`lambdactl config` shows them)"
        )
    bucket_ms = settings.ingest_bucket_s * 1000
    marker = completeness.latest(settings)
    covered = marker.complete_before_ms if marker is not None else None
    if covered is None:
        raise NotCoveredYet("the archiver has not published completeness for every partition yet")
    assert marker is not None
    refusal = completeness.doubt(
        marker, last_archived(settings), int(time.time() * 1000), settings.archiver.completeness_path
    )
    if refusal:
        raise CutoffError(refusal)
    if requested_ms is None:
        cutoff = covered - covered % bucket_ms
    else:
        if requested_ms % bucket_ms:
            raise CutoffError(
                f"cutoff {iso(requested_ms)} is not on an ingest-bucket boundary ({settings.ingest_bucket_s}s)"
            )
        now_ms = int(time.time() * 1000)
        # How far past now a requested cutoff may lie: the DAG's sensor waits for the archiver to
        # cover it for at most this long from its first poke, so a later one is a typo, not a wait.
        wait_s = settings.batch.completeness_wait_s
        if requested_ms > now_ms + wait_s * 1000:  # a typo, not a wait
            raise CutoffError(
                f"cutoff {iso(requested_ms)} is more than batch.completeness_wait_s ({wait_s}s) after now "
                f"({iso(now_ms)}): the DAG's sensor would give up on it first; give a time the archiver can "
                "cover by then"
            )
        if requested_ms > covered:
            raise NotCoveredYet(
                f"cutoff {iso(requested_ms)} is not covered: the master dataset is complete only below {iso(covered)}"
            )
        cutoff = requested_ms
    late = behind(current, views if views is not None else list(current.entries) if current else [], cutoff)
    if late and requested_ms is None:
        # Only a completeness that went back (its markers rebuilt with the master) puts the planned
        # cutoff behind what serves: the archiver passes it again, and the DAG's sensor waits for that.
        raise NotCoveredYet(
            f"the master dataset is complete only below {iso(covered)}, behind what serves "
            + ", ".join(late)
            + ": waiting for the archiver to pass it"
        )
    if late:
        raise Overtaken(f"cutoff {iso(cutoff)} is behind what serves " + ", ".join(late))
    return cutoff


def selected_views(settings: Settings, current: Pointer | None, names: list[str] | None = None) -> list[View]:
    """The views a run computes, under their storage names (definitions.view_versions): every view the
    speed layer is to maintain, or those of `names` (view names — a changed view's served and new
    definitions — or storage names). CutoffError for an unknown name, or a view whose served
    definition is unknown."""
    from definitions.view_versions import unresolved_message
    from stores.view_versions import read_versions

    versions = read_versions(settings, pointer=current)
    unresolved = [n for n in versions.unresolved if names is None or n in names]
    if unresolved:
        raise CutoffError(unresolved_message(unresolved))
    if not names:
        return list(versions.maintained)
    try:
        return [versions.maintained[storage] for storage in versions.storages(names)]
    except KeyError as exc:
        known = sorted({*versions.served, *versions.maintained.names()})
        raise CutoffError(f"unknown view {exc.args[0]!r}; the views are: {', '.join(known)}") from None


def deduplicated_events(spark, settings: Settings, cutoff_ms: int, views: list[View]):
    """Master records ingested before the cutoff, one per event_id (the first archived), with only
    the columns `views` read."""
    return events_before(read_master(spark, settings), cutoff_ms, views)


def events_before(master, cutoff_ms: int, views: list[View]):
    """`master`'s records ingested before the cutoff, one per event_id (the first archived), reduced
    to the columns `views` read: the job caches this frame, and a column no view reads (a referrer,
    the Kafka position once used) would be shuffled, sorted and cached for nothing."""
    from pyspark.sql import functions as F

    # The instant goes to Spark as epoch milliseconds: a datetime literal is converted in the Python
    # process's local time zone, whatever Spark's session zone says.
    cutoff_date = datetime.fromtimestamp(cutoff_ms / 1000, UTC).date()
    before = master.where(
        (F.col("ingest_date") <= F.lit(cutoff_date)) & (F.col("ingest_time") < F.timestamp_millis(F.lit(cutoff_ms)))
    )
    return first_copies(before).select(*read_columns(views, master))


def run_batch(
    settings: Settings,
    cutoff_ms: int | None = None,
    views: list[str] | None = None,
    force: bool = False,
    spark=None,
    swap: bool = True,
) -> BatchResult:
    """Plan the cutoff, write and verify version N, then (unless `swap` is False) move the pointer to it."""
    from definitions.spark import spark_session

    started = time.monotonic()
    store = version_store(settings)
    current = store.pointer()
    selected = selected_views(settings, current, views)
    names = [v.name for v in selected]
    cutoff = choose_cutoff(settings, cutoff_ms, current, names)
    run_id = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    if current is not None and not force and all(current.cutoff_of(n) == cutoff and current.entry(n) for n in names):
        # A served table dropped outside the platform is computed again, not "nothing to do".
        gone = missing_tables(settings, {current.entries[n].table for n in names})
        if not gone:
            log.info(
                "%s already served at cutoff %s: nothing to do (use --force to recompute)",
                ", ".join(names),
                iso(cutoff),
            )
            runs = store.runs()
            for served in sorted({current.entries[n].version for n in names}):
                if runs.get(served, {}).get("state") == "verified":  # its swap landed, its caller timed out
                    swap_version(settings, served)  # records it (and the runs it replaced)
            return BatchResult(
                current.entries[names[0]].version, cutoff, current.run_id, skipped="already at this cutoff"
            )
        log.warning("served at cutoff %s, but table(s) %s are gone: computing them again", iso(cutoff), ", ".join(gone))

    options = batch_session_options(settings)
    bulk = batch_bulk_load.chosen_load(settings) == "bulk"
    if bulk and spark is None:
        options.update(batch_bulk_load.session_options(settings))
    spark = spark or spark_session(settings, "lambda-batch", options)
    if bulk:
        batch_bulk_load.check_session(spark)  # before any work: a session without its classes cannot load
    batch_bulk_load.sweep_leftovers(settings)  # whatever this run loads by: a killed bulk run's HFiles
    retain_before_writing(settings, store)
    version = store.allocate_version()
    bind(run=run_id, version=version)  # every later line of this process names the run
    me = psutil.Process()
    # The swap moves only these views' entries (all of them, for a full run), and only if the
    # pointer is still at the generation read above, or moved only in ways that leave what the run
    # planned against as it was (stores.pointer_moves.run_basis: another view's swap, a clean-up).
    store.record_run(
        version,
        state="writing",
        run_id=run_id,
        cutoff_ms=cutoff,
        started_ms=int(time.time() * 1000),
        views=names,
        full=not views,
        based_on=current.generation if current is not None else 0,
        basis=run_basis(current, names, full=not views),
        host=socket.gethostname(),
        pid=me.pid,
        pid_started_ms=int(me.create_time() * 1000),
        pid_start_ticks=start_ticks(me.pid),  # what stores.batch_views._may_run compares: no clock in it
        boot_id=boot_id(),
        previous_cutoff_ms=min(current.cutoff_of(n) for n in names) if current is not None else 0,
    )
    log.info(
        "run %s: version %d, cutoff %s, views %s", run_id, version, iso(cutoff), ", ".join(v.name for v in selected)
    )
    events = None
    try:
        with heartbeat(store, version, beat_every_s(settings.batch.retention_grace_s)):
            events = deduplicated_events(spark, settings, cutoff, selected).cache()
            n_events = events.count()
            log.info("%d distinct events ingested before the cutoff", n_events)
            tables, splits = write_tables(settings, spark, version, selected, events, bulk)
        run_stats = {
            "events": n_events,
            "tables": {k: vars(t) for k, t in tables.items()},
            "splits": {k: [key.hex() for key in keys] for k, keys in splits.items()},
            "seconds": round(time.monotonic() - started, 1),
        }
        if not store.record_run_if(
            version, "writing", state="verified", stats=run_stats, verified_ms=int(time.time() * 1000)
        ):
            raise RuntimeError(
                f"run {run_id} (version {version}) is no longer recorded writing: retention gave it up (no beat "
                "within batch.retention_grace_s) and may have dropped its tables. Run the batch again"
            )
    except BaseException:
        try:
            # Only while it is "writing": a plain put brought back, half made, a record retention deleted.
            store.record_run_if(version, "writing", state="failed", finished_ms=int(time.time() * 1000))
        except Exception as exc:  # HBase away too: the run's own error is the one to see
            log.warning("could not record run %d as failed (%s: %s)", version, type(exc).__name__, exc)
        raise
    finally:
        if events is not None:  # a session the caller passed outlives the run
            try:
                events.unpersist()
            except Exception as exc:  # a dead driver JVM: the run's own error is the one to see
                log.warning("could not release the run's cached events: %s", exc)
    if swap:
        swap_version(settings, version)
    elapsed = time.monotonic() - started
    log.info(
        "run %s done in %.1fs: version %d %s cutoff %s",
        run_id,
        elapsed,
        version,
        "serves" if swap else "is written and verified (not swapped) for",
        iso(cutoff),
    )
    return BatchResult(version, cutoff, run_id, tables=tables, events=n_events, seconds=elapsed)


def verify_version(settings: Settings, version: int) -> dict[str, TableStats]:
    """Scan a written version's tables again and check them against the figures its run recorded.
    A version still to swap beats while it is scanned (batch_layer.heartbeat: retention keeps its
    tables however long the scan takes) and, checked, has its swap's grace period run from then."""
    store = version_store(settings)
    run = store.runs().get(version)
    if run is None or run.get("state") not in ("verified", "live", "retired"):
        raise VerificationError(f"version {version} was not written and verified (run: {run})")
    stats = run.get("stats")
    if not isinstance(stats, dict) or not isinstance(stats.get("tables"), dict):
        raise VerificationError(
            f"version {version}'s run record has no figures to check its tables against (state {run['state']}, "
            "stats missing or malformed): run the batch again"
        )
    current = store.pointer()
    # Still to swap: a verified run the pointer does not name (one it names swapped, and is kept so).
    to_swap = run["state"] == "verified" and version not in (current.versions() if current is not None else ())
    if to_swap:
        not_past_grace(settings, version, run)  # retention may drop its tables at any time: not scanned
        beat_verified(store, version)  # the first beat, before any wait
    tables_kept(settings, version, run)
    registry = {v.name: v for v in selected_views(settings, current, run.get("views"))}
    unknown = [name for name in run["stats"]["tables"] if name not in registry]
    if unknown:  # `views apply` switched a changed view since the run: its old definition is gone
        raise VerificationError(
            f"version {version} computed {', '.join(unknown[:5])}: a definition no longer declared or served "
            "(a changed view switched since the run), so its tables cannot be checked and the version cannot "
            "serve; run the batch again"
        )
    found = {}
    recorded_splits = run["stats"].get("splits", {})  # runs of earlier releases have none: one scan
    beats = (
        heartbeat(store, version, beat_every_s(settings.batch.retention_grace_s), state="verified")
        if to_swap
        else nullcontext()
    )
    with beats:
        for name, recorded in run["stats"]["tables"].items():
            expected = TableStats(**recorded)
            splits = _recorded_splits(version, name, recorded_splits)
            verify_table(settings, layout.table_name(name, version), registry[name], expected, splits)
            found[name] = expected
    if to_swap:
        beat_verified(store, version)  # checked now: the swap's grace from here
    return found


def _recorded_splits(version: int, name: str, recorded: object) -> list[bytes]:
    """The row keys run `version` cut `name`'s verification at; VerificationError if the record
    does not hold a list of hex strings there."""
    keys = recorded.get(name, []) if isinstance(recorded, dict) else recorded
    try:
        if not isinstance(keys, list):
            raise TypeError(type(keys).__name__)
        return [bytes.fromhex(key) for key in keys]
    except (TypeError, ValueError) as e:
        raise VerificationError(
            f"run {version}: its recorded verification cuts for {name} are malformed ({e})"
        ) from None


def parse_cutoff(text: str) -> int:
    """An ISO cutoff → epoch ms (an argparse type: the error says what is wrong; the boundary is
    checked later)."""
    try:
        return parse_iso_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Recompute the batch views from the master dataset.")
    parser.add_argument(
        "--cutoff", type=parse_cutoff, help="ISO time on an ingest-bucket boundary (default: the last complete one)"
    )
    parser.add_argument("--views", type=view_names, help="comma-separated view names (default: all)")
    parser.add_argument("--force", action="store_true", help="recompute even if the serving version has this cutoff")
    args = parser.parse_args(argv)
    settings = process_settings("batch")
    configure_from("batch", settings)
    try:
        result = run_batch(
            settings,
            args.cutoff,
            args.views,
            args.force,
        )
    except (CutoffError, PointerMoved) as exc:
        log.error("%s", exc)
        return 2
    except Exception as exc:  # a verification, a store that does not answer: one line (the traceback at debug)
        # A JVM's error names its cause on a later line; its stack frames ("at …") are left out.
        said = " ".join(t for t in (line.strip() for line in str(exc).splitlines()) if t and not t.startswith("at "))
        log.error("batch failed: %s: %s", type(exc).__name__, said[:500])
        log.debug("batch failed", exc_info=True)
        return 1
    if result.skipped:
        log.info("skipped: %s", result.skipped)
    return 0


if __name__ == "__main__":
    sys.exit(main())
