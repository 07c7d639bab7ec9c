"""The rules of `lambdactl replay` that need no store: what `--from` means, the split, who holds a
claim, which realtime readers a replay can switch with (lambdactl/replay.py runs the replay)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from definitions.times import parse_iso_ms
from lambdactl.output import _say


class NotSwitched(Exception):
    """The replay wrote its rows but does not switch to them (they are left to the clean-up)."""


class Refused(Exception):
    """The replay cannot be exact as asked; nothing was changed."""


class MarkCleared(Exception):
    """`--resume` of a retired storage name: no replay can finish it, so its mark was taken off."""


def parse_from(text: str | None) -> list[tuple[int, int]] | int | None:
    """`--from`, read without any store: None (the view's batch cutoff), a time (epoch ms), or the
    (partition, offset) pairs of `offsets:P=O,...`. Refused naming what is wrong."""
    from datetime import datetime

    text = (text or "").strip()
    if not text:
        return None
    if text.startswith("offsets:"):
        pairs, named = [], set()
        for item in text[len("offsets:") :].split(","):
            p, _, o = item.partition("=")
            if not all(  # "²" is a digit too; more than 19 digits is no Kafka partition or offset
                part.strip().isascii() and part.strip().isdigit() and len(part.strip()) <= 19 for part in (p, o)
            ):
                raise Refused(f"--from offsets: expected PARTITION=OFFSET, got {item[:60]!r}")
            if int(p) in named:  # each pair asks Kafka: the list is at most the topic's partitions
                raise Refused(f"--from offsets: partition {int(p)} is named twice")
            named.add(int(p))
            pairs.append((int(p), int(o)))
        return pairs
    try:
        zoned = datetime.fromisoformat(text).tzinfo is not None
    except (ValueError, OverflowError):
        raise Refused(f"--from: not an ISO time or offsets:P=O,...: {text[:60]!r}") from None
    if not zoned:
        raise Refused(f"--from: give the time zone (e.g. Z): {text[:60]!r}")
    try:
        return parse_iso_ms(text, "--from")  # in whole milliseconds: through a float, 1 ms early at times
    except ValueError as exc:
        raise Refused(str(exc)) from None


def resolve_from(
    text: str | None,
    cutoff_ms: int,
    bucket_s: int,
    now_ms: int,
    ingest_time_at=None,
    on_raised: Callable[[str], None] | None = None,
) -> int:
    """`--from` → the first ingest time replayed (ms), on the ingest-bucket grid (floored, so the first
    bucket is whole). `text`: empty for the view's batch cutoff; an ISO time with a zone; or
    `offsets:P=O,...` (Kafka partition = offset: from the earliest of their ingest times, which
    `ingest_time_at(partition, offset)` gives). A time before the view's batch cutoff is raised to it
    (told to `on_raised`): no answer reads the view's realtime rows below it, and Kafka's retention
    may no longer hold those records."""
    parsed = parse_from(text)
    if parsed is None:
        moment = cutoff_ms
    elif isinstance(parsed, list):
        if not parsed or ingest_time_at is None:
            raise Refused("--from offsets: name at least one PARTITION=OFFSET")
        try:
            moment = min(ingest_time_at(p, o) for p, o in parsed)
        except ValueError as exc:  # no such partition, an offset Kafka does not keep
            raise Refused(f"--from offsets: {exc}") from None
    else:
        moment = parsed
    if moment > now_ms:
        raise Refused(f"--from is in the future: {(text or '')[:60]!r}")
    if moment < cutoff_ms:
        if on_raised is not None:
            on_raised(
                f"--from {(text or '')[:60]!r} is before the view's batch cutoff: raised to the view's batch cutoff "
                f"({cutoff_ms} ms), below which the batch answers"
            )
        moment = cutoff_ms
    size = bucket_s * 1000
    return max(moment, 0) // size * size


# How far after a claim's start its holder's process may seem to start (the kernel counts a process's
# start in clock ticks from boot: it can read a little late).
_START_TOLERANCE_MS = 2_000


def running_holder(claim) -> int | None:
    """The process id of the replay holding `claim` when it still runs on this host; None when it
    ended, runs elsewhere (not knowable here) or the claim names no process. A replay that started
    after the claim was made (its process id reused: a replay of another view, say) is not its
    holder: a claim is made after its process started."""
    import socket

    import psutil

    from definitions.files import same_process

    if not claim.host or not claim.pid or claim.host != socket.gethostname():
        return None
    same = None
    if claim.pid_start_ticks is not None and claim.boot_id:
        same = same_process(claim.pid, claim.pid_start_ticks, claim.boot_id)
    if same is not None:
        # The process's start in ticks since boot names it whatever the wall clock did since the
        # claim (a clock stepped ahead made a live holder's create_time later than its claim).
        try:
            alive = psutil.Process(claim.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return None
        return claim.pid if alive and same else None
    try:  # a claim of an earlier release: its process by its command line and wall-clock start
        process = psutil.Process(claim.pid)
        running = (
            process.status() != psutil.STATUS_ZOMBIE
            and "replay" in process.cmdline()
            and process.create_time() * 1000 <= claim.started_ms + _START_TOLERANCE_MS
        )
    except psutil.Error:
        return None
    return claim.pid if running else None


def replay_start(now_ms: int, marks: Iterable) -> tuple[int, int]:
    """(the replay's start, which names it, and the time its split counts from). It starts after
    every mark it read, so the newest overlay answers; its split counts from this host's clock
    alone: a mark made on a host whose clock ran ahead would otherwise move the split, and the wait
    for it, as far ahead."""
    return max([now_ms] + [m.started_ms + 1 for m in marks]), now_ms


def split_after(started_ms: int, latest_ingest_ms: int | None, bucket_ms: int) -> int:
    """The replay's split: the first ingest-bucket boundary after both the replay's start (this host's
    clock) and the latest ingest time Kafka held then (the brokers' clock), so every record ingested
    at or after it was appended after the replay began, whichever clock is ahead."""
    began = max(started_ms, latest_ingest_ms or 0)
    return (began // bucket_ms + 1) * bucket_ms


# How far the split may move on for records appended before the replay began: each bucket it moves
# past this host's clock is waited out, so a brokers' clock hours ahead made the replay wait hours.
MAX_SPLIT_MOVE_MS = 600_000


def settled_split(
    wait: Callable[[int], list], split_ms: int, appended: dict[int, int], bucket_ms: int, view: str = "V"
):
    """(spans, split) once no record appended before the replay began (below `appended`, per
    partition) is ingested at or after the split: `wait(split)` gives the spans up to a split. No
    clock is trusted: such a record (the brokers' clock ahead of this host's, their latest time not
    read) would be left to the view's own rows, so the split moves one bucket on, up to
    MAX_SPLIT_MOVE_MS (at least 3 buckets): further, the clocks are wrong, and the replay stops
    (SystemExit; the view stays claimed and answers as before)."""
    allowed_ms = max(3 * bucket_ms, MAX_SPLIT_MOVE_MS)
    limit_ms = split_ms + allowed_ms
    while True:
        spans = wait(split_ms)
        early = [s.partition for s in spans if s.end < appended.get(s.partition, 0)]
        if not early:
            return spans, split_ms
        if split_ms + bucket_ms > limit_ms:
            raise SystemExit(
                f"partition(s) {early} still hold records appended before the replay began and ingested at or after "
                f"{split_ms} ms: the brokers' clock runs more than {allowed_ms // 1000} s ahead of this host's. The view "
                f"stays claimed and answers as before: set both clocks right (NTP), then `lambdactl replay --view "
                f"{view} --resume`"
            )
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


# The claims a take-over names (its own chain included), newest first: bounded, so a claim resumed
# again and again stays under a mark's 4,096 bytes (MAX_MARK_BYTES; about 220 started_ms fit) and
# readable. A replay further back that still ran would be refused at its switch: it no longer holds
# the claim.
MAX_REPLACED = 64


def taken_over(replaced: Iterable) -> tuple[int, ...]:
    """What a `--resume` records it replaces: the unswitched claim it takes over and the ones that
    claim had taken over, at most MAX_REPLACED of them."""
    chains = [(m.started_ms, *m.replaces) for m in replaced if not m.switched]
    return tuple(chains[0][:MAX_REPLACED]) if chains else ()


def topic_refusal(
    topic: str,
    spans: list,
    position: dict[int, int] | None,
    committed: bool,
    instead: str = "replay from a batch run instead",
) -> str | None:
    """Why a replay cannot read `topic` as the speed layer does (None: it can): `spans` what it holds
    (stores.kafka.PartitionSpan, one per partition); `position` the speed layer's committed offset
    per partition of it, None when its checkpoint holds none (`committed`: it has committed
    micro-batches all the same, so it reads another topic). A replay of a topic that is not there,
    another one, or one deleted and made again reads nothing or only its new records, and switches
    the view to those rows as if they were all (so would a fresh speed layer after `reset-speed`);
    `instead`: what to do about a topic made again."""
    if not spans:
        return f"topic {topic} has no partitions (no such topic): check kafka.events_topic and the brokers"
    if position is None:
        if committed:
            return (
                f"the speed layer's checkpoint reads no topic {topic}: this command's kafka.events_topic is not "
                "the platform's (an environment variable or a lambda.toml here?)"
            )
        return None
    held = {span.partition for span in spans}
    if set(position) - held:  # partitions added since the speed layer's last commit are read too
        return (
            f"topic {topic} has partitions {sorted(held)}, the speed layer reads {sorted(position)}: "
            "another topic, or one made again"
        )
    behind = made_again(spans, position)
    if behind:
        return (
            f"topic {topic} ends before where the speed layer has read in partition(s) {behind}: the topic was "
            f"deleted and made again (its old records are gone); {instead}"
        )
    return None


def made_again(spans: list, position: dict[int, int]) -> list[int]:
    """The partitions of a topic (`spans`: stores.kafka.PartitionSpan) that end before the speed
    layer's committed `position` in them, or that it read and the topic lacks: the topic was
    deleted and made again."""
    held = {span.partition for span in spans}
    return sorted(
        {*(p for p in position if p not in held), *(s.partition for s in spans if s.end < position.get(s.partition, 0))}
    )
