"""What a start of the speed layer checks against its checkpoint, and records in its marker: the
settings the checkpoint's state was made with, the views it maintains and since when, and, on a
fresh start, that Kafka still holds what no batch run absorbed (the realtime tables are emptied and
written again from the earliest offset)."""

from __future__ import annotations

import logging
import time

from definitions.settings import Settings
from definitions.times import iso_ms
from definitions.views import Registry
from stores import realtime_origin

log = logging.getLogger("lambda.speed")


def check_checkpoint_settings(settings: Settings, declared: Registry) -> Registry:
    """The views to maintain, under their storage names: the `declared` ones, plus the definition that
    still answers a view whose declaration changed (definitions.view_versions).

    The aggregation state depends on the ingest bucket size and on each view's definition: refuse to
    resume a checkpoint made with another bucket size (its windows would be wrong) or when a view's
    declaration changed and the definition answering it meanwhile is unknown. Record in the marker
    the size of a new checkpoint, its first start, since when each view is maintained (a view new to
    this start from now: stores.view_lifecycle) and the definition of each."""
    from definitions.view_versions import unresolved_message
    from stores import checkpoints, kafka, kafka_coverage
    from stores.registry import version_store
    from stores.view_lifecycle import maintained_since
    from stores.view_versions import versions_of

    try:
        marker = checkpoints.read_marker(settings)
    except checkpoints.MarkerUnreadable as exc:  # a stop naming it, not a traceback at every restart
        raise SystemExit(str(exc)) from None
    position = checkpoints.speed_layer_position(settings)
    committed = position is not None or checkpoints.speed_layer_committed(settings)
    if not committed:
        # No micro-batch committed (a first start, `lambdactl reset-speed`, the checkpoint removed by
        # hand, the job killed before its first commit): Spark reads Kafka from the earliest offset, so
        # this is a fresh start, marker or not. Kafka must still hold what no batch run absorbed: the
        # reset checked it, but retention may have deleted more since.
        try:
            lost = kafka_coverage.unabsorbed_loss(settings)
        except kafka_coverage.NoSuchTopic as exc:  # before the fresh start empties the realtime tables
            raise SystemExit(str(exc)) from None
        if lost:
            then = "`lambdactl reset-speed`" if marker is not None else "`lambdactl up`"
            raise SystemExit(
                f"the speed layer's checkpoint {settings.speed.checkpoint_dir} has no committed micro-batch: a "
                f"fresh start. {kafka_coverage.loss_message(lost)}, then {then}"
            )
        if marker is not None:
            log.warning("the checkpoint has no committed micro-batch: a fresh start (its marker is written anew)")
        marker = None
    if marker is None and committed:
        # Taken for a first start, it would say every view is maintained since time 0 (a view added
        # since would be served exact from any cutoff) and resume windows of an unknown bucket size.
        raise SystemExit(
            f"the speed layer's checkpoint {settings.speed.checkpoint_dir} has committed micro-batches but no "
            "marker (what it was made with): restore the marker, or remove the checkpoint too with `lambdactl "
            "reset-speed` (the speed layer then recomputes from the earliest Kafka offset)"
        )
    if marker is not None and marker.ingest_bucket_s != settings.ingest_bucket_s:
        made_with = marker.ingest_bucket_s
        raise SystemExit(
            f"the speed layer's checkpoint {settings.speed.checkpoint_dir} was made with ingest_bucket_s="
            f"{made_with}, settings say {settings.ingest_bucket_s}: keep {made_with}, or remove the checkpoint "
            "and its marker with `lambdactl reset-speed` (the speed layer then recomputes from the earliest Kafka "
            "offset; docs/operations.md, changing a data-shaping setting)"
        )
    if marker is not None and marker.dedupe_window_s not in (None, settings.speed.dedupe_window_s):
        raise SystemExit(
            f"the speed layer's checkpoint {settings.speed.checkpoint_dir} was made with speed.dedupe_window_s="
            f"{marker.dedupe_window_s}, settings say {settings.speed.dedupe_window_s}: keep "
            f"{marker.dedupe_window_s}, or remove the checkpoint and its marker with `lambdactl reset-speed`"
        )
    changed = [] if marker is None else marker.changed_limits(settings)
    if changed:
        # Records it counted were judged under those limits; the archiver judges new ones under these.
        raise SystemExit(
            f"the speed layer's checkpoint {settings.speed.checkpoint_dir} counted records judged by "
            f"{', '.join(changed)}; settings say otherwise: keep those, or remove the checkpoint and its "
            "marker with `lambdactl reset-speed` (docs/operations.md, changing a data-shaping setting)"
        )
    versions = versions_of(declared, marker, version_store(settings).pointer())
    if versions.unresolved:
        raise SystemExit(
            f"refusing to resume the checkpoint {settings.speed.checkpoint_dir}: {unresolved_message(versions.unresolved)}"
        )
    maintained = versions.maintained
    names = maintained.names()
    definitions = {v.name: v.fingerprint for v in maintained}
    declarations = {v.name: v.shape() for v in maintained}
    now_ms = int(time.time() * 1000)
    if marker is None:
        clear_earlier_rows(settings)
        # What an uncommitted checkpoint planned (offsets, state) was made with earlier settings: gone
        # before the new marker, so Spark starts from the earliest offset under these. (Killed in
        # between, the next start finds the same: no commit, so a fresh start again.)
        checkpoints.remove_checkpoint_dir(settings)
        realtime_origin.write_origin(settings, now_ms)  # the rows written from now on are this start's
        views = maintained_since(None, names, now_ms)
        # A new checkpoint's state is made by the operator the settings name, and aggregates the cells
        # views have in common once; the marker says both.
        dedupe = None if settings.speed.dedupe_operator == checkpoints.DEDUPE_SCAN else checkpoints.DEDUPE_TIMERS
        checkpoints.write_marker(
            settings,
            now_ms,
            views,
            definitions,
            declarations,
            origin=True,
            dedupe=dedupe,
            cells=checkpoints.CELLS_SHARED,
        )
        return maintained
    # A marker from before start times were recorded was written at the first start; one from before
    # views were recorded was written when every view declared now was (they could not change).
    made_by = marker.dedupe or checkpoints.DEDUPE_SCAN
    if made_by != settings.speed.dedupe_operator:
        log.warning(
            "the speed layer's checkpoint %s holds de-duplication state made by %s; settings name %s for a new "
            "checkpoint: it goes on with %s (`lambdactl reset-speed` starts one with %s)",
            settings.speed.checkpoint_dir,
            made_by,
            settings.speed.dedupe_operator,
            made_by,
            settings.speed.dedupe_operator,
        )
    started = marker.started_ms if marker.started_ms is not None else checkpoints.file_written_ms(settings)
    check_store_origin(settings, marker, started)
    previous = marker.views if marker.views is not None else dict.fromkeys(names, 0)
    if set(names) - set(previous):
        # A view added is maintained from after every record the stopped speed layer counted without
        # it: after the latest Kafka holds (the brokers' clock), when that is ahead of this host's.
        now_ms = max(now_ms, (kafka.latest_ingest_ms(settings) or -1) + 1)
    views = maintained_since(previous, names, now_ms)
    if (
        views != marker.views
        or started != marker.started_ms
        or definitions != marker.definitions
        or declarations != marker.declarations
        or marker.dedupe_window_s is None  # an older marker: recorded from now on
        or marker.events != checkpoints.event_limits(settings)
        or not marker.origin  # an older marker: the store's record of the start was written just now
    ):
        added = sorted(set(views) - set(previous))
        removed = sorted(set(previous) - set(views))
        if added or removed:
            log.info("views added since the last start: %s; removed: %s", added or "none", removed or "none")
        # The state's de-duplication operator and labelling of cells stay the ones it was made with.
        checkpoints.write_marker(
            settings,
            started,
            views,
            definitions,
            declarations,
            origin=True,
            dedupe=marker.dedupe,
            cells=marker.cells,
        )
    return maintained


def check_store_origin(settings: Settings, marker, started_ms: int) -> None:
    """Refuse to resume a checkpoint whose rows the realtime store does not hold (stores.realtime_origin):
    its next micro-batches write again only the groups they touch, so every other one would stay
    short, and be served as complete, until a batch run absorbs its buckets. A marker that does not
    say the store records it (written before it did, restored from a backup, or by an earlier
    release after a downgrade): recorded now, for the rows the store holds."""
    held = realtime_origin.read_origin(settings)
    if held == started_ms:
        return
    if not marker.origin:
        realtime_origin.write_origin(settings, started_ms)
        return
    c = settings.cassandra
    found = "holds no record of them" if held is None else f"holds the rows of another start ({iso_ms(held)})"
    raise SystemExit(
        f"the realtime store (keyspace {c.keyspace} at {', '.join(c.hosts)}) does not hold the rows the speed layer's "
        f"checkpoint {settings.speed.checkpoint_dir} wrote since its start at {iso_ms(started_ms)}: it {found}. "
        "Its rows were lost (a node's data removed, the keyspace dropped), or cassandra.keyspace or cassandra.hosts "
        "changed (or replication was raised and the repair it needs has not run); resumed, the checkpoint would "
        "leave answers short. Point the settings back (or run the repair), or let the speed layer write every row "
        "again from Kafka with `lambdactl reset-speed`"
    )


def clear_earlier_rows(settings: Settings) -> None:
    """A fresh checkpoint writes every realtime row again from the earliest Kafka offset: rows an
    earlier checkpoint wrote go first. Left, they were counted beside the new ones, twice or under
    the old ingest buckets (the documented change of ingest_bucket_s removes the checkpoint). A
    replay's rows answer beside the view's own, so a fresh start waits until none is recorded."""
    from stores import realtime_schema, replays

    claims, overlays = replays.read_replays(settings)
    if claims:  # only the replay removes its claim: a batch run does not
        raise SystemExit(
            f"the speed layer starts from a fresh checkpoint, which writes every realtime row again, but a replay of "
            f"{sorted(claims)} is under way or was stopped before its switch: finish it (`lambdactl replay --view "
            f"{sorted(claims)[0]} --resume`) or cancel it (`--cancel`), then start again"
        )
    if overlays:
        raise SystemExit(
            f"the speed layer starts from a fresh checkpoint, which writes every realtime row again, but replays of "
            f"{sorted(overlays)} switched: let a batch run absorb them (`lambdactl batch`, then `lambdactl "
            "clean-realtime`), then start again"
        )
    cleared = realtime_schema.clear_rows(settings)
    if cleared:
        log.warning(
            "fresh checkpoint: emptied the realtime tables %s (rows of an earlier checkpoint); every row is written "
            "again from the earliest offset Kafka holds",
            cleared,
        )
