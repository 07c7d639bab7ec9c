"""`lambdactl reset-speed`: stop the speed layer and remove its checkpoint and marker, so its next
start is a fresh one — how a data-shaping setting (`ingest_bucket_s`, `speed.dedupe_window_s`)
is changed (docs/operations.md).

A fresh start empties the realtime tables and recomputes them from the earliest offset Kafka
keeps; it is refused while a replay is recorded, so this command refuses then too, before it
changes anything. The speed layer stays stopped: the next `lambdactl up` starts it.
"""

from __future__ import annotations

import argparse
import logging

from definitions import jobs
from definitions.files import LockHeld, state_lock
from definitions.settings import Settings
from definitions.view_loading import load_views
from lambdactl.output import VIEWS_LOCK_HOLDERS, _emit, _say
from stores.kafka_coverage import loss_message, unabsorbed_loss
from stores.view_versions import read_versions

log = logging.getLogger("lambdactl")


def cmd_reset_speed(settings: Settings, args: argparse.Namespace) -> int:
    from infra.state_lock import stack_lock

    # No `up` may start the speed layer, nor `views apply` restart it, between its stop and the removal.
    # The views lock first, as `views apply` takes them (its restart takes the stack lock inside it).
    with (
        state_lock(settings.state_dir, "views.lock", VIEWS_LOCK_HOLDERS, _say),
        stack_lock(settings.state_dir, _say),
    ):
        return _reset(settings, args)


def _reset(settings: Settings, args: argparse.Namespace) -> int:
    from infra.errors import StackError
    from infra.stack import Stack
    from stores import checkpoints, replays
    from stores.registry import version_store

    try:
        claims, overlays = replays.read_replays(settings)
    except Exception as exc:  # HDFS away: whether a replay is recorded cannot be known, so nothing changes
        log.error(
            "cannot read the recorded replays (%s: %s): with HDFS up (`lambdactl up` starts the stores), run it again",
            type(exc).__name__,
            str(exc)[:300],
        )
        return 2
    if claims:
        # Only the replay itself removes its claim: a batch run absorbs a switched replay, not this.
        log.error(
            "a replay of %s is under way (or was stopped before its switch), and a fresh speed layer would "
            "empty the tables it writes: finish it (`lambdactl replay --view %s --resume`) or cancel it (`--cancel`) first",
            sorted(claims),
            sorted(claims)[0],
        )
        return 2
    if overlays:
        log.error(
            "replays of %s switched, and a fresh speed layer would empty the tables their rows answer beside: "
            "let a batch run absorb them (`lambdactl batch`, then `lambdactl clean-realtime`) first",
            sorted(overlays),
        )
        return 2
    try:
        declared = load_views(settings)
    except Exception as exc:  # noqa: BLE001 - a view module's own code runs at import
        log.error("the declared views cannot be loaded (%s: %s): fix or restore the module", type(exc).__name__, exc)
        return 2
    try:
        # One reading of the pointer for both checks: a batch run swapping between two readings
        # would have them judge different states.
        pointer = version_store(settings).pointer()
        try:
            versions = read_versions(settings, declared, pointer=pointer)
        except checkpoints.MarkerUnreadable as exc:  # a damaged marker is a reason to reset: none to compare
            _say(f"{exc}: the views' definitions are taken as declared")
            versions = None
        refusal, again = _topic_check(settings)
        lost = None if refusal else unabsorbed_loss(settings, declared, pointer, again)
    except Exception as exc:  # HBase, HDFS or Kafka away: the checks cannot be made, so nothing is removed
        log.error(
            "cannot check the views' definitions and that Kafka still holds what no batch run absorbed (%s: %s): "
            "with Kafka, HDFS and HBase up (`lambdactl up` starts the stores), run it again",
            type(exc).__name__,
            str(exc)[:300],
        )
        return 2
    if refusal:
        log.error("%s: nothing was removed", refusal)
        return 2
    changing = sorted({*versions.pending, *versions.unresolved}) if versions is not None else []
    if changing:
        # Only the marker records which definition a storage name holds: a fresh start would maintain
        # the declared one under the served name, whose batch table holds the one before.
        log.error(
            "the definition of %s changed and the speed layer has not switched to it: a fresh start would answer "
            "from batch rows of one definition and realtime rows of the other. Finish the change with `lambdactl "
            "views apply` (or restore the declaration) first; if the speed layer refuses to start meanwhile because a "
            "data-shaping setting changed, put its old value back for that",
            ", ".join(changing),
        )
        return 2
    if lost:
        log.error("%s, then reset", loss_message(lost))
        return 2
    if args.stopped:
        ran = None
    else:
        try:
            ran = Stack(settings).stop(jobs.SPEED_LAYER)
        except StackError as exc:
            log.error("%s. Stop the speed layer wherever it runs, then run `lambdactl reset-speed --stopped`", exc)
            return 2
        _say("the speed layer is stopped" if ran else "the speed layer was not running")
    try:
        # A speed layer holds this lock while it runs (definitions.files.run_alone), also one the
        # supervisor did not start: its checkpoint is not removed under it.
        with state_lock(settings.state_dir, f"{jobs.SPEED_LAYER}.lock", "the speed layer", wait=False):
            removed = checkpoints.remove_checkpoint(settings)
    except LockHeld as held:
        log.error(
            "a speed layer still runs with state folder %s (pid %s), one the stack does not supervise: nothing was "
            "removed. Stop it, then run `lambdactl reset-speed --stopped`",
            settings.state_dir,
            held.holder,
        )
        return 2
    _say(f"removed {', '.join(removed)}" if removed else "no checkpoint or marker was there")
    claims, overlays = replays.read_replays(settings)  # a replay that began beside this reset
    if overlays:
        log.error(
            "a replay of %s switched while the speed layer was being reset: `lambdactl up` refuses the fresh "
            "start until a batch run absorbs it (`lambdactl batch`, then `lambdactl clean-realtime`)",
            sorted(overlays),
        )
        return 2
    if claims:
        _say(
            f"a replay of {sorted(claims)} began meanwhile: it refuses to switch, and ends, as the speed layer was reset"
        )
    _say(
        "the next `lambdactl up` starts the speed layer afresh: it empties the realtime tables and recomputes them "
        "from the earliest Kafka offset (to change a data-shaping setting: `lambdactl down`, edit it in "
        f"{settings.state_dir}/settings.json, `lambdactl up`)"
    )
    if args.json:
        _emit({"stopped": ran, "removed": removed})
    return 0


def _topic_check(settings: Settings) -> tuple[str | None, bool]:
    """(why the topic this command's settings name is not the one the speed layer read, or None;
    whether it is that topic deleted and made again). Not there, or not the one its checkpoint
    reads, the loss check would read it and find nothing lost, and a fresh start serve answers
    missing the records no batch run absorbed as exact. Made again, its old records are gone: the
    loss check then takes every partition for one whose records before its first kept were deleted."""
    from lambdactl.replay_rules import made_again, topic_refusal
    from stores.kafka import spans_from
    from stores.kafka_gaps import committed_positions
    from stores.webhdfs import WebHdfs

    topic = settings.kafka.events_topic
    with WebHdfs(settings) as fs:
        # Unreadable offsets (a damaged checkpoint: a reason to reset) name no topic: no refusal.
        read = committed_positions(fs, settings.speed.checkpoint_dir.rstrip("/"))
    spans, position = spans_from(settings, 0), read.get(topic)
    if position is not None and spans and made_again(spans, position):
        return None, True
    return topic_refusal(topic, spans, position, bool(read)), False  # bool(read): offsets naming other topics only


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "reset-speed",
        help="stop the speed layer and remove its checkpoint and marker: its next start recomputes from Kafka",
    )
    parser.add_argument(
        "--stopped",
        action="store_true",
        help="the speed layer runs elsewhere (stack.managed_services) and was stopped there: do not stop it here",
    )
    parser.add_argument("--json", action="store_true", help="also print what was done as one JSON line")
    parser.set_defaults(func=cmd_reset_speed)
