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

from definitions.settings import Settings
from infra.state_lock import stack_lock
from lambdactl.output import _emit, _say
from lambdactl.replay_rules import (
    MarkCleared,
    NotSwitched,
    Refused,
    parse_from,
    reader_refusal,
    replay_start,
    resolve_from,
    running_holder,
    settled_split,
    split_after,
    taken_over,
    topic_refusal,
)
from lambdactl.replay_switch import SwitchUnfinished, delete_replaced, switched_to
from stores.replays import ReplayMarked


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
        if done.get("kept") == "taken_over":
            _say(
                f"{done['view']}: its claim is off, but a `--resume` claimed the view meanwhile and took this replay "
                f"over: its rows ({done['shadow']}) are kept, and that replay goes on"
            )
            return 2
        if done.get("kept"):
            _say(
                f"{done['view']}: replay cancelled; it answers as before. A mark named its rows ({done['shadow']}) "
                "while the cancel looked (a switch taken back, a claim being written): they are left, read by no "
                "answer, for `lambdactl clean-realtime`"
            )
            return 0
        _say(f"{done['view']}: replay cancelled; {done['rows_deleted']:,} rows it wrote deleted; it answers as before")
        return 0
    try:
        parse_from(args.from_)  # a mistyped --from is said before any store is asked
        plan = _plan(settings, args)
    except MarkCleared as exc:
        _say(str(exc))
        return 0
    except Refused as exc:
        _say(f"replay refused, nothing changed: {exc}")
        return 2
    except Exception as exc:  # Kafka or HDFS away while `--from` was looked up (or a --resume cleared a claim)
        _say(
            f"replay of {args.view} failed before it read Kafka: {type(exc).__name__}: {str(exc)[:500]}; "
            f"{_left(settings, args.view)}"
        )
        return 1
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
    except SwitchUnfinished as exc:
        _say(str(exc))
        return 1
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


def _speed_position(settings: Settings) -> tuple[dict[int, int] | None, bool]:
    """(the speed layer's committed offsets of `events`, or None; whether it committed at all)."""
    from definitions import jobs
    from stores.kafka_gaps import checkpoint_dirs, committed_position
    from stores.webhdfs import WebHdfs

    checkpoint = checkpoint_dirs(settings, jobs.SPEED_LAYER)[0]
    with WebHdfs(settings) as fs:
        position = committed_position(fs, checkpoint, settings.kafka.events_topic)
        return position, position is not None or any(n.isdigit() for n in fs.list(f"{checkpoint}/commits"))


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
        held = read_replays(settings)[0].get(args.view)
        if held is not None:
            from stores.replay_cleanup import forget_claim
            from stores.replays import ReplayMarked

            if running_holder(held) is not None:
                raise Refused(
                    f"the replay holding {args.view}'s mark still runs (pid {held.pid} on this host): wait for it, "
                    "or stop it, then `--resume`"
                )
            try:
                forget_claim(settings, held)
            except ReplayMarked as exc:
                raise Refused(str(exc)) from None
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
        on_raised=_say,
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
    if held is None and args.resume:
        raise Refused(
            f"no replay of {args.view} holds its mark: nothing to resume (run it without --resume to start one)"
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
    spans = spans_from(settings, start)
    refusal = topic_refusal(settings.kafka.events_topic, spans, *_speed_position(settings))
    if refusal:
        raise Refused(refusal)
    lost = lost_since(spans, start)
    if lost:
        if start == from_ms:
            later = "Replay from a later --from"
        elif held is not None and held.from_ms == start:
            later = (
                f"This replay starts at {start} ms, where the replay holding its mark does: "
                f"`lambdactl replay --view {args.view} --cancel`, then replay from a later --from"
            )
        else:
            later = f"This replay starts at {start} ms, where its switched replay's rows begin (a new one covers them)"
        raise Refused(
            f"Kafka no longer holds every record from {start} ms: {'; '.join(lost[:3])}. {later}; or rebuild "
            f"with `lambdactl batch --views {args.view} --force`"
        )
    return view, start, [m for m in (held, answering) if m is not None]


def _run(settings: Settings, view, from_ms: int, replaced: list, args: argparse.Namespace) -> int:
    from definitions.spark import spark_session
    from definitions.times import iso_ms
    from lambdactl.views import refresh_api
    from speed_layer.replay import rewrite
    from stores.checkpoints import read_marker
    from stores.kafka import end_offsets, latest_ingest_ms, lost_since
    from stores.replays import holds, mark, release, shadow_name

    # Every record below these was appended before the replay began (read before its claim: read after
    # it, records of the seconds between count too, and may move the split a whole bucket on).
    appended = end_offsets(settings)
    started_ms, began_ms = replay_start(int(time.time() * 1000), replaced)
    shadow = shadow_name(view.name, started_ms)
    # A claim taken over that left the view's rows short passes that on: its 409 stays until a switch.
    short = any(m.rows_short for m in replaced)
    claim = mark(
        settings,
        view.name,
        from_ms,
        started_ms,
        take_over=args.resume,
        shadow=shadow,
        replaces=taken_over(replaced),  # the claim a --resume takes over, and its chain
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
    split_ms = split_after(began_ms, latest_ingest_ms(settings), bucket_ms)
    _say(f"{view.name}: the speed layer's own rows answer from {iso_ms(split_ms)}; waiting for that bucket to begin")
    waiting = time.monotonic()
    # Read twice the de-duplication window W before `from_ms` too: a copy of an event first ingested
    # there is dropped, as the running speed layer dropped it (only first copies from `from_ms` on
    # count). Its state for an event_id lasts until the watermark (latest ingest time − W) passes the
    # first copy's time + W: copies up to about 2W after the first are dropped.
    look_back_ms = 2 * settings.speed.dedupe_window_s * 1000
    spans, split_ms = settled_split(
        lambda split: _wait_for_split(
            settings, view.name, max(from_ms - look_back_ms, 0), split, timeout_s=marker.ingest_bucket_s + 120
        ),
        split_ms,
        appended,
        bucket_ms,
        view.name,
    )
    waited_s = time.monotonic() - waiting
    lost = lost_since(spans, from_ms)
    if not lost and lost_since(spans, from_ms - look_back_ms):
        _say(
            f"{view.name}: Kafka no longer holds all of twice the de-duplication window before {iso_ms(from_ms)}: a copy "
            "of an event first ingested in what it deleted may be counted twice"
        )
    if lost:
        raise SystemExit(
            f"Kafka deleted records of the replay meanwhile ({'; '.join(lost[:3])}); {view.name} stays claimed "
            f"and answers as before: `lambdactl replay --view {view.name} --cancel`, then replay from a later "
            f"--from, or run a batch of it (`lambdactl batch --views {view.name} --force`)"
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
    # `lambdactl reset-speed` removes the marker holding the stack lock: judged and switched holding it,
    # a reset cannot come between (one under way is waited for, and then refuses the switch).
    with stack_lock(settings.state_dir, _say):
        now = read_marker(settings)
        if now is None or now.started_ms != marker.started_ms:  # `lambdactl reset-speed` ran meanwhile
            release(settings, claim)
            raise NotSwitched(
                f"the speed layer was reset or started afresh while the replay ran: its rows of {view.name} are "
                "made again from Kafka, so the replayed ones are not switched to (a later clean-up deletes them)"
            )
        switched_to(settings, claim, split_ms)
    # Switched: the replay is done, whatever happens from here (the API workers read the marks again
    # within a minute when not told; rows left are read by no answer).
    old_rows = {m.shadow for m in replaced if m.shadow} - {shadow}  # of the replays this one replaced
    try:
        refresh_api(settings)
        _say(f"{view.name}: switched to the replayed rows for ingest buckets {iso_ms(from_ms)} to {iso_ms(split_ms)}")
        deleted = delete_replaced(settings, view.name, sorted(old_rows))
    except KeyboardInterrupt:
        _say(
            f"{view.name}: interrupted after the switch: it answers from the replayed rows; the replaced "
            "replays' rows are left, read by no answer (`lambdactl clean-realtime` deletes them)"
        )
        return 130
    except Exception as exc:  # noqa: BLE001 - switched: the replay is done, only the deletion failed
        deleted = 0
        _say(
            f"{view.name}: switched, but the replaced replays' rows could not be deleted ({type(exc).__name__}: "
            f"{str(exc)[:300]}); no answer reads them, and `lambdactl clean-realtime` deletes them"
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


def _wait_for_split(settings: Settings, view: str, from_ms: int, split_ms: int, timeout_s: float):
    """The spans of [from_ms, split_ms) once every partition holds a record ingested at or after
    `split_ms` (the archiver's ticks reach every partition every few seconds)."""
    from stores.kafka import spans_between

    # No record after the split exists before it by this host's clock; by the brokers' (ahead) one
    # it may: slept at most `timeout_s`, then asked.
    before_split = min(split_ms / 1000 - time.time(), timeout_s)
    deadline = time.monotonic() + max(before_split, 0) + timeout_s
    if before_split > 0:
        time.sleep(before_split)
    while True:
        spans = spans_between(settings, from_ms, split_ms)
        if spans is not None:
            return spans
        if time.monotonic() > deadline:
            raise SystemExit(
                f"no record ingested after {split_ms} ms in some partition of the events topic after {timeout_s:.0f}s "
                "more (is the archiver's ticker running?); the view stays claimed and answers as before: "
                f"`lambdactl replay --view {view} --resume` later"
            )
        time.sleep(2.0)
