"""`lambdactl replay --view V [--from WHEN]`: rebuild a view's realtime rows from Kafka.

For when the realtime store lost a view's rows, or a speed-layer fix must be applied to rows
already written (run it once the fix runs): faster than a batch run over the whole master dataset,
as it reads only Kafka from `--from` on (by default the view's batch cutoff, the first ingest time
the merge reads realtime rows of). Steps:

1. refuse, changing nothing, what cannot be replayed exactly: an unknown view, one the speed layer
   does not maintain yet, a `--from` Kafka no longer holds every record after (retention), a view
   another replay holds;
2. claim the view (stores.replays) under a fresh storage name for its rows (the shadow); the view
   shows `replaying` and keeps answering from the rows it has;
3. choose the split, the first ingest-bucket boundary after the claim: every row of a later bucket is
   written by the running speed layer after the replay began; wait until every partition has a
   record ingested at or after it, and read the offsets of the records in [--from, split);
4. aggregate them through the speed layer's own code (speed_layer/replay.py) into the shadow rows;
5. switch: the serving layer reads the view's rows of [--from, split) from the shadow name from now
   on (one HDFS file appearing; every API worker is told before the command goes on), then delete
   the rows of the replays this one replaced.

Interrupted before step 5, the view keeps answering as before and stays claimed until a replay of it
completes (`--resume`, which replays from the earlier of its `--from` and the claim's) or the claim is
cancelled (`--cancel`: the claim goes, then its rows, which no answer read). A replay of a
view a switched replay answers for replays from the earlier `--from` of the two, so its rows cover
the older ones'.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from definitions.settings import Settings
from lambdactl.output import _emit, _say
from stores.replays import ReplayMarked


class NotSwitched(Exception):
    """The replay wrote its rows but does not switch to them (they are left to the clean-up)."""


class Refused(Exception):
    """The replay cannot be exact as asked; nothing was changed."""


class MarkCleared(Exception):
    """`--resume` of a retired storage name: no replay can finish it, so its mark was taken off."""


def resolve_from(text: str | None, cutoff_ms: int, bucket_s: int, now_ms: int, ingest_time_at=None) -> int:
    """`--from` → the first ingest time replayed (ms), on the ingest-bucket grid (floored, so the first
    bucket is whole). `text`: empty for the view's batch cutoff; an ISO time with a zone; or
    `offsets:P=O,...` (Kafka partition = offset: from the earliest of their ingest times, which
    `ingest_time_at(partition, offset)` gives)."""
    from datetime import datetime

    if not text:
        moment = cutoff_ms
    elif text.startswith("offsets:"):
        pairs = []
        for item in text[len("offsets:") :].split(","):
            p, _, o = item.partition("=")
            if not all(  # "²" is a digit too; more than 19 digits is no Kafka partition or offset
                part.strip().isascii() and part.strip().isdigit() and len(part.strip()) <= 19 for part in (p, o)
            ):
                raise Refused(f"--from offsets: expected PARTITION=OFFSET, got {item!r}")
            pairs.append((int(p), int(o)))
        if not pairs or ingest_time_at is None:
            raise Refused("--from offsets: name at least one PARTITION=OFFSET")
        try:
            moment = min(ingest_time_at(p, o) for p, o in pairs)
        except ValueError as exc:  # no such partition, an offset Kafka does not keep
            raise Refused(f"--from offsets: {exc}") from None
    else:
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise Refused(f"--from: not an ISO time or offsets:P=O,...: {text!r}") from None
        if parsed.tzinfo is None:
            raise Refused(f"--from: give the time zone (e.g. Z): {text!r}")
        moment = int(parsed.timestamp() * 1000)
    if moment > now_ms:
        raise Refused(f"--from is in the future: {text!r}")
    size = bucket_s * 1000
    return max(moment, 0) // size * size


def running_holder(claim) -> int | None:
    """The process id of the replay holding `claim` when it still runs on this host; None when it
    ended, runs elsewhere (not knowable here) or the claim names no process."""
    import socket

    import psutil

    if not claim.host or not claim.pid or claim.host != socket.gethostname():
        return None
    try:
        process = psutil.Process(claim.pid)
        running = process.status() != psutil.STATUS_ZOMBIE and "replay" in process.cmdline()
    except psutil.Error:
        return None
    return claim.pid if running else None


def split_after(started_ms: int, latest_ingest_ms: int | None, bucket_ms: int) -> int:
    """The replay's split: the first ingest-bucket boundary after both the replay's start (this host's
    clock) and the latest ingest time Kafka held then (the brokers' clock), so every record ingested
    at or after it was appended after the replay began, whichever clock is ahead."""
    began = max(started_ms, latest_ingest_ms or 0)
    return (began // bucket_ms + 1) * bucket_ms


def settled_split(wait: Callable[[int], list], split_ms: int, appended: dict[int, int], bucket_ms: int):
    """(spans, split) once no record appended before the replay began (below `appended`, per
    partition) is ingested at or after the split: `wait(split)` gives the spans up to a split. No
    clock is trusted: such a record (the brokers' clock ahead of this host's, their latest time not
    read) would be left to the view's own rows, so the split moves one bucket on."""
    while True:
        spans = wait(split_ms)
        early = [s.partition for s in spans if s.end < appended.get(s.partition, 0)]
        if not early:
            return spans, split_ms
        split_ms += bucket_ms
        _say(
            f"partition(s) {early} hold records appended before the replay began and ingested after the split: "
            f"the split moves to {split_ms} ms"
        )


def reader_refusal(reader: type, setting: str) -> str | None:
    """Why a replay cannot switch with this realtime reader class, or None: once switched, answers
    ask the reader to leave the replayed ingest buckets out (`skip_ingest`, stores/adapters.py)."""
    import inspect

    def takes(name: str) -> bool:
        try:
            params = inspect.signature(getattr(reader, name)).parameters.values()
        except (AttributeError, TypeError, ValueError):
            return False
        return any(p.name == "skip_ingest" or p.kind is p.VAR_KEYWORD for p in params)

    lacking = [name for name in ("series", "bucket") if not takes(name)]
    if not lacking:
        return None
    return (
        f"stores.realtime_reader = {setting!r}: its {', '.join(lacking)} take no skip_ingest, so the replayed "
        "rows could not answer for the view (stores/adapters.py); rebuild it with "
        "`lambdactl batch --views VIEW --force` instead"
    )


def cmd_replay(settings: Settings, args: argparse.Namespace) -> int:
    if getattr(args, "cancel", False):
        from lambdactl.replay_cancel import CancelIncomplete, cancel

        if args.from_ or args.resume:
            _say("replay refused, nothing changed: --cancel takes no --from or --resume")
            return 2
        try:
            done = cancel(settings, args.view)
        except Refused as exc:
            _say(f"cancel refused, nothing changed: {exc}")
            return 2
        except CancelIncomplete as exc:
            if args.json:
                _emit(exc.summary)
            _say(f"replay cancelled, not cleaned up: {exc}")
            return 1
        if args.json:
            _emit(done)
        if done["switched"]:
            _say(
                f"{done['view']}: not cancelled: its replay switched as the cancel began; its rows answer and are kept"
            )
            return 2
        _say(f"{done['view']}: replay cancelled; {done['rows_deleted']:,} rows it wrote deleted; it answers as before")
        return 0
    try:
        plan = _plan(settings, args)
    except MarkCleared as exc:
        _say(str(exc))
        return 0
    except Refused as exc:
        _say(f"replay refused, nothing changed: {exc}")
        return 2
    view, from_ms, replaced = plan
    try:
        return _run(settings, view, from_ms, replaced, args)
    except Refused as exc:  # the view moved since the plan
        _say(f"replay refused, nothing changed: {exc}")
        return 2
    except ReplayMarked as exc:  # another replay holds the mark (at the claim), or took it (at the switch)
        _say(f"replay refused: {exc}")
        return 2
    except NotSwitched as exc:
        _say(f"replay not switched: {exc}")
        return 2
    except KeyboardInterrupt:
        _say(f"replay of {view.name} interrupted; {_left(settings, view.name)}")
        return 130
    except Exception as exc:  # a store or Spark failed part-way: the claim stays, the view answers as before
        _say(f"replay of {view.name} failed: {type(exc).__name__}: {str(exc)[:500]}; {_left(settings, view.name)}")
        return 1


def _left(settings: Settings, view: str) -> str:
    """What a replay that ended part-way left, for the operator: whether the view stays claimed."""
    from stores.replays import read_marks

    try:
        claimed = view in read_marks(settings)
    except Exception:  # HDFS away: the claim is likely still there
        claimed = True
    if not claimed:
        return "the view keeps answering as before and is not claimed: run the replay again when the cause is gone"
    return (
        f"the view keeps answering as before and stays claimed: once no replay of it runs, "
        f"`lambdactl replay --view {view} --resume` (when the cause is gone) or `--cancel`"
    )


def _plan(settings: Settings, args: argparse.Namespace):
    from definitions.view_versions import unresolved_message
    from stores.checkpoints import read_marker
    from stores.kafka import ingest_time_at, lost_since, spans_from
    from stores.registry import adapter_class, version_store
    from stores.replays import read_replays
    from stores.view_lifecycle import changed_definitions, lifecycle
    from stores.view_versions import read_versions

    refusal = reader_refusal(adapter_class(settings, "realtime_reader"), settings.stores.realtime_reader)
    if refusal:
        raise Refused(refusal)
    marker = read_marker(settings)
    pointer = version_store(settings).pointer()
    versions = read_versions(settings, marker=marker, pointer=pointer)
    if args.view in versions.unresolved:
        raise Refused(unresolved_message([args.view]))
    if (
        args.resume
        and pointer is not None
        and args.view in pointer.retiring
        and args.view not in versions.maintained.names()
    ):
        if args.view in read_replays(settings)[0]:
            from stores.replays import unmark

            unmark(settings, args.view)
            raise MarkCleared(
                f"{args.view} is retired: its replay mark is taken off, and its realtime rows are deleted by "
                "the next clean-up (`lambdactl clean-realtime` or `lambdactl views apply`)"
            )
    try:  # a view is replayed under the definition answering it (or name a storage name)
        view = versions.maintained[versions.storages([args.view])[0]]
    except KeyError:
        raise Refused(f"unknown view {args.view!r}; declared: {', '.join(versions.served)}") from None
    applied = marker.definitions if marker else None
    changed = changed_definitions({view.name: view.fingerprint}, applied)
    state = lifecycle(view.name, marker.views if marker else None, pointer, changed=changed)
    if marker is None or state.state == "building":
        raise Refused(
            f"the speed layer does not maintain {args.view} as declared from a batch cutoff "
            f"({state.reason or 'it has not started'})"
        )
    entry = pointer.entry(view.name) if pointer is not None else None
    now_ms = int(time.time() * 1000)
    from_ms = resolve_from(
        args.from_,
        entry.cutoff_ms if entry is not None else 0,
        marker.ingest_bucket_s,
        now_ms,
        lambda p, o: ingest_time_at(settings, p, o),
    )
    claims, overlays = read_replays(settings)
    held, answering = claims.get(view.name), overlays.get(view.name)
    if held is not None and held.unreadable and not args.resume:
        raise Refused(
            f"{args.view} has a replay mark that is not one ({held.unreadable[:200]}); it answers 409 until "
            "`--resume` replaces it, replaying from the view's cutoff"
        )
    if held is not None and args.resume and running_holder(held) is not None:
        raise Refused(
            f"the replay holding {args.view}'s mark still runs (pid {held.pid} on this host): wait for it, or stop "
            "it, then `--resume`"
        )
    if held is not None and not args.resume:
        raise Refused(
            f"a replay of {args.view} holds its mark since {held.started_ms} ms (from {held.from_ms} ms): it is "
            "running, or it was interrupted; when none runs, `--resume` takes over"
        )
    # Cover what the claim and the switched replay cover, from the view's cutoff on (no answer reads
    # rows below it, and Kafka's retention may no longer hold those records).
    floor = entry.cutoff_ms // (marker.ingest_bucket_s * 1000) * marker.ingest_bucket_s * 1000 if entry else 0
    start = min([from_ms] + [max(m.from_ms, floor) for m in (held, answering) if m is not None])
    lost = lost_since(spans_from(settings, start), start)
    if lost:
        raise Refused(
            f"Kafka no longer holds every record from {start} ms: {'; '.join(lost[:3])}. Replay from a later "
            f"--from, or rebuild with `lambdactl batch --views {args.view} --force`"
        )
    return view, start, [m for m in (held, answering) if m is not None]


def _run(settings: Settings, view, from_ms: int, replaced: list, args: argparse.Namespace) -> int:
    from definitions.spark import spark_session
    from definitions.times import iso_ms
    from lambdactl.views import refresh_api
    from serving_layer.speed_state import replaced_rows_kept_s
    from speed_layer.replay import rewrite
    from stores.checkpoints import read_marker
    from stores.kafka import end_offsets, latest_ingest_ms, lost_since
    from stores.realtime_cleanup import delete_view_from
    from stores.replays import holds, mark, release, shadow_name, switch

    # Every record below these was appended before the replay began (read before its claim: read after
    # it, records of the seconds between count too, and may move the split a whole bucket on).
    appended = end_offsets(settings)
    started_ms = max([int(time.time() * 1000)] + [m.started_ms + 1 for m in replaced])  # after every mark read
    shadow = shadow_name(view.name, started_ms)
    taken = [(m.started_ms, *m.replaces) for m in replaced if not m.switched]  # the claim a --resume takes over
    # A claim taken over that left the view's rows short passes that on: its 409 stays until a switch.
    short = any(m.rows_short for m in replaced)
    claim = mark(
        settings,
        view.name,
        from_ms,
        started_ms,
        take_over=args.resume,
        shadow=shadow,
        replaces=taken[0] if taken else (),
        short=short,
    )
    # Still maintained, now that the claim is made: a retirement (`views apply`) that began after the
    # plan first stops the speed layer maintaining the name, then deletes its rows unless claimed.
    try:
        marker = read_marker(settings)
    except Exception:
        if not short:  # a short claim stays: the view's answers stay refused until a `--resume` ends
            release(settings, claim)  # this one only: a `--resume` elsewhere may have taken it over since
        raise
    if marker is None or (marker.views is not None and view.name not in marker.views):
        if not short:
            release(settings, claim)
        raise Refused(f"the speed layer no longer maintains {view.name}: it is being retired")
    _say(
        f"{view.name}: replaying from {iso_ms(from_ms)} into fresh rows ({shadow}); it answers from the rows "
        "it has until the replay switches"
    )
    refresh_api(settings)
    bucket_ms = marker.ingest_bucket_s * 1000
    split_ms = split_after(started_ms, latest_ingest_ms(settings), bucket_ms)
    _say(f"{view.name}: the speed layer's own rows answer from {iso_ms(split_ms)}; waiting for that bucket to begin")
    waiting = time.monotonic()
    # Read the de-duplication window before `from_ms` too: a copy of an event first ingested there is
    # dropped, as the running speed layer dropped it (only first copies from `from_ms` on count).
    look_back_ms = settings.speed.dedupe_window_s * 1000
    spans, split_ms = settled_split(
        lambda split: _wait_for_split(
            settings, max(from_ms - look_back_ms, 0), split, timeout_s=marker.ingest_bucket_s + 120
        ),
        split_ms,
        appended,
        bucket_ms,
    )
    waited_s = time.monotonic() - waiting
    lost = lost_since(spans, from_ms)
    if not lost and lost_since(spans, from_ms - look_back_ms):
        _say(
            f"{view.name}: Kafka no longer holds all of the de-duplication window before {iso_ms(from_ms)}: a copy "
            "of an event first ingested in what it deleted may be counted twice"
        )
    if lost:
        raise SystemExit(
            f"Kafka deleted records of the replay meanwhile ({'; '.join(lost[:3])}); {view.name} stays claimed "
            f"and answers as before: replay from a later --from with --resume, or run a batch of it"
        )
    if not holds(settings, claim):  # before the long part: a `--resume` elsewhere took the claim over
        raise ReplayMarked(
            f"another replay of {view.name} took its claim over (a `--resume`) while this one waited: it goes on, "
            "this one stops before reading Kafka"
        )
    spark = spark_session(settings, "lambda-replay", {"spark.driver.memory": settings.batch.driver_memory})
    try:
        done = rewrite(spark, settings, view, spans, time.time_ns() // 1000, into=shadow, count_from_ms=from_ms)
    finally:
        spark.stop()
    now = read_marker(settings)
    if now is None or now.started_ms != marker.started_ms:  # `lambdactl reset-speed` ran meanwhile
        release(settings, claim)
        raise NotSwitched(
            f"the speed layer was reset or started afresh while the replay ran: its rows of {view.name} are "
            "made again from Kafka, so the replayed ones are not switched to (a later clean-up deletes them)"
        )
    switch(settings, claim, split_ms)
    refresh_api(settings)
    _say(f"{view.name}: switched to the replayed rows for ingest buckets {iso_ms(from_ms)} to {iso_ms(split_ms)}")
    deleted = 0
    old_rows = {m.shadow for m in replaced if m.shadow} - {shadow}  # of the replays this one replaced
    if old_rows:
        # Every API worker has read the replay marks again by then, even one whose read just now
        # failed or raced with the switch, or refuses the view: the replaced rows are read by none.
        settle_s = replaced_rows_kept_s(settings)
        _say(f"{view.name}: deleting the replaced replays' rows in {settle_s:.0f}s, once no API worker reads them")
        time.sleep(settle_s)
    for old in sorted(old_rows):
        cleaned = delete_view_from(settings, old, 0, time.time_ns() // 1000)
        deleted += cleaned.rows_below_cutoff
        if not cleaned.complete:  # no answer reads them; `lambdactl clean-realtime` deletes orphans
            _say(
                f"{view.name}: rows of the replaced replay {old} are left in {len(cleaned.unreadable)} token range(s) "
                "that could not be cleaned; no answer reads them, and a later clean-up deletes them"
            )
    summary = {
        "view": view.name,
        "from": iso_ms(from_ms),
        "from_ms": from_ms,
        "split_ms": split_ms,
        "shadow": shadow,
        "records": done.records,
        "rows_written": done.rows,
        "replaced_rows_deleted": deleted,
        "seconds": round(done.seconds, 1),
        "split_wait_s": round(waited_s, 1),
        "records_per_s": round(done.records_per_s),
        "end_offsets": {str(s.partition): s.end for s in spans},
    }
    if args.json:
        _emit(summary)
    else:
        _say(json.dumps(summary))
    _say(f"{view.name}: replayed {done.records:,} records in {done.seconds:.1f}s; its answers read them")
    return 0


def _wait_for_split(settings: Settings, from_ms: int, split_ms: int, timeout_s: float):
    """The spans of [from_ms, split_ms) once every partition holds a record ingested at or after
    `split_ms` (the archiver's ticks reach every partition every few seconds)."""
    from stores.kafka import spans_between

    before_split = split_ms / 1000 - time.time()
    deadline = time.monotonic() + max(before_split, 0) + timeout_s
    if before_split > 0:  # no record after the split can exist before it
        time.sleep(before_split)
    while True:
        spans = spans_between(settings, from_ms, split_ms)
        if spans is not None:
            return spans
        if time.monotonic() > deadline:
            raise SystemExit(
                f"no record ingested after {split_ms} ms in some partition of the events topic after {timeout_s:.0f}s "
                "more (is the archiver's ticker running?); the view stays claimed and answers as before: "
                "`lambdactl replay --resume` later"
            )
        time.sleep(2.0)
