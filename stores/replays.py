"""Replay marks on HDFS: which views `lambdactl replay` is rebuilding, from when, into which rows.

A replay writes a view's realtime rows again from Kafka under a fresh storage name of their own (its
`shadow`), for the ingest buckets from `from_ms` up to `split_ms`, a bucket boundary after the replay
began. Two kinds of file, beside the speed layer's checkpoint in `<checkpoint_dir>-replays/`:

- `<view>.json`, the *claim* = `{"from_ms", "started_ms", "shadow"}`: a replay is writing (or was
  interrupted). Created only if absent (HDFS create without overwrite): two replays of one view
  cannot both hold it. While it is there the view is `replaying` (stores.view_lifecycle) and keeps
  answering from the rows it had. `--resume` takes over an interrupted one.
- `<view>.switched-<started_ms>.json`, an *overlay* = the same plus `split_ms`, created once every
  shadow row is written, before the claim is deleted: from then on the serving layer reads the
  view's realtime rows of ingest buckets in [from_ms, split_ms) from the shadow name and the others
  from the view's own name (serving_layer/replay_overlay.py). Of several, the newest counts (a file
  is read only once written whole, and the older ones are deleted after the newer one exists): the
  switch is one file appearing. The overlay stays until the view's batch cutoff reaches `split_ms`;
  then no answer reads either name's rows there, and the clean-up deletes it and the shadow rows.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
from dataclasses import dataclass, replace

from definitions.files import boot_id, start_ticks
from definitions.settings import Settings

log = logging.getLogger(__name__)


MAX_MARK_BYTES = 4096  # a mark is ~120 bytes; a larger file is not one (and is never read whole)
_LATEST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: the last moment ISO formatting can write
_NAME = re.compile(r"(?P<view>[^./]{1,200})(?P<switched>\.switched-(?P<started>[0-9]{1,16}))?\.json")


def _mark_name(name: str) -> re.Match | None:
    """The parts of a mark file's name (its view: a declared view's name, an identifier), or None."""
    found = _NAME.fullmatch(name)
    return found if found is not None and found["view"].isidentifier() else None


@dataclass(frozen=True)
class ReplayMark:
    view: str
    from_ms: int
    started_ms: int
    shadow: str = ""  # the storage name the replay writes the view's rows under
    split_ms: int | None = None  # set once switched: [from_ms, split_ms) is read from `shadow`
    # Set for a mark file that is there but is no mark (why): the view is refused like a claim of an
    # earlier release, until `lambdactl replay --view V --resume` replaces it (from the cutoff on).
    unreadable: str = ""
    host: str = ""  # the host and process of the replay holding the claim (`--resume` asks whether it runs)
    pid: int = 0
    # That process's start in clock ticks since boot, and the boot: they name it whatever the wall
    # clock did since (definitions.files.start_ticks). None/"" in a claim of an earlier release.
    pid_start_ticks: int | None = None
    boot_id: str = ""
    # A claim a `--resume` made: the started_ms of the claims it took over (theirs too). Such a replay,
    # still running, may switch (the resume's newer rows replace its rows afterwards).
    replaces: tuple[int, ...] = ()
    # The view's own rows are short until this replay switches: it took over the claim of an
    # earlier release's replay (which deleted them before rewriting them in place), or one that was
    # unreadable, or one that was short itself. Its queries answer 409, as that claim's did.
    short: bool = False

    @property
    def rows_short(self) -> bool:
        """Whether the view's own rows are short while this mark holds it (its answers refused)."""
        return not self.switched and (not self.shadow or bool(self.unreadable) or self.short)

    @property
    def switched(self) -> bool:
        return self.split_ms is not None and bool(self.shadow)

    def to_json(self) -> bytes:
        doc = {"from_ms": self.from_ms, "started_ms": self.started_ms, "shadow": self.shadow, "split_ms": self.split_ms}
        if self.host:
            doc.update(host=self.host, pid=self.pid)
        if self.pid_start_ticks is not None and self.boot_id:
            doc.update(pid_start_ticks=self.pid_start_ticks, boot_id=self.boot_id)
        if self.replaces:
            doc["replaces"] = list(self.replaces)
        if self.short:
            doc["short"] = True
        return json.dumps(doc).encode()

    @classmethod
    def from_json(cls, view: str, data: bytes) -> ReplayMark:
        """The mark `data` holds; ValueError naming what is wrong for anything else, whatever the bytes."""
        if len(data) > MAX_MARK_BYTES:
            raise ValueError(f"{len(data)} bytes, more than a mark's {MAX_MARK_BYTES}")
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise ValueError(f"not JSON ({type(exc).__name__})") from None
        if not isinstance(doc, dict):
            raise ValueError(f"a JSON {type(doc).__name__}, not an object")

        def moment(key: str, required: bool = True) -> int | None:
            value = doc.get(key)
            if value is None and not required:
                return None
            if type(value) is not int or not 0 <= value <= _LATEST_MS:
                raise ValueError(f"{key} is {str(value)[:40]!r}, not a time in ms from 1970 to 9999")
            return value

        from_ms, started_ms, split_ms = moment("from_ms"), moment("started_ms"), moment("split_ms", False)
        assert from_ms is not None and started_ms is not None
        shadow = doc.get("shadow") or ""
        if shadow and shadow != shadow_name(view, started_ms):
            raise ValueError(f"shadow {str(shadow)[:80]!r} is not {view}'s replay rows of {started_ms}")
        if split_ms is not None and split_ms < from_ms:
            raise ValueError(f"split_ms {split_ms} is before from_ms {from_ms}")
        host, pid = doc.get("host") or "", doc.get("pid") or 0
        if not isinstance(host, str) or len(host) > 255 or type(pid) is not int or not 0 <= pid < 2**31:
            raise ValueError("host or pid is not a host name and a process id")
        ticks, boot = doc.get("pid_start_ticks"), doc.get("boot_id")
        boot = "" if boot is None else boot
        if (ticks is not None and (type(ticks) is not int or not 0 <= ticks < 2**63)) or not (
            isinstance(boot, str) and len(boot) <= 64
        ):
            raise ValueError("pid_start_ticks or boot_id is not a process's start and a boot")
        replaces = doc.get("replaces", [])
        if not isinstance(replaces, list) or not all(type(t) is int and 0 <= t <= _LATEST_MS for t in replaces):
            raise ValueError("replaces is not a list of times in ms")
        short = doc.get("short", False)
        if type(short) is not bool:
            raise ValueError("short is not true or false")
        return cls(
            view,
            from_ms,
            started_ms,
            shadow,
            split_ms,
            host=host,
            pid=pid,
            pid_start_ticks=ticks if boot else None,
            boot_id=boot if ticks is not None else "",
            replaces=tuple(replaces),
            short=short,
        )


SHADOW_SEPARATOR = "~replay-"  # never in a declared view's name (definitions.views: identifiers)
SWITCHED = ".switched-"


def shadow_name(view: str, started_ms: int) -> str:
    """The storage name a replay started at `started_ms` writes `view`'s realtime rows under."""
    return f"{view}{SHADOW_SEPARATOR}{started_ms}"


class ReplayMarked(RuntimeError):
    """Another replay of the view holds its mark (or one was interrupted)."""


def marks_dir(settings: Settings) -> str:
    return f"{settings.speed.checkpoint_dir.rstrip('/')}-replays"


def read_marks(settings: Settings) -> dict[str, ReplayMark]:
    """The claims: every view a replay is writing (or was interrupted in). Raises WebHdfsError when
    HDFS cannot be read."""
    return read_replays(settings)[0]


def read_overlays(settings: Settings) -> dict[str, ReplayMark]:
    """Every view's switched replay (its newest), whose rows answer for [from_ms, split_ms)."""
    return read_replays(settings)[1]


def read_replays(settings: Settings) -> tuple[dict[str, ReplayMark], dict[str, ReplayMark]]:
    """(claims, overlays) from one listing. A file still being created is left out (it is not there
    yet); one deleted between the listing and its read means a switch happened meanwhile, so the
    directory is listed again (an older overlay read as gone must not hide the newer one)."""
    claims, overlays, _ = read_replays_and_empty_claims(settings)
    return claims, overlays


def read_replays_and_empty_claims(
    settings: Settings,
) -> tuple[dict[str, ReplayMark], dict[str, ReplayMark], set[str]]:
    """read_replays, and from the same listing the views whose claim file is empty: being created (a
    `--resume` overwriting a claim, say), or left so by a crash. read_replays leaves such a file out,
    but a replay may switch under it (_answers_for)."""
    from stores.webhdfs import WebHdfs

    with WebHdfs(settings) as fs:
        for _ in range(5):
            empty: set[str] = set()
            found = _read_listed(fs, marks_dir(settings), empty)
            if found is not None:
                return (*found, empty)
    raise RuntimeError(f"the replay marks in {marks_dir(settings)} kept changing while they were read")


def _read_listed(
    fs, directory: str, empty: set[str] | None = None
) -> tuple[dict[str, ReplayMark], dict[str, ReplayMark]] | None:
    """One listing's marks; None when a file vanished between the listing and its read. A name that
    is no mark's is left alone; an empty file is still being created (HDFS shows it empty until it is
    closed; its view goes into `empty` for a claim); a mark file that is none (no file, too big, not a
    mark) is a claim marked `unreadable`."""
    claims: dict[str, ReplayMark] = {}
    overlays: dict[str, ReplayMark] = {}
    for name, kind, length in sorted(fs.entries(directory)):
        found = _mark_name(name)
        if found is None:
            continue
        view, switched = found["view"], found["switched"]
        if kind != "FILE" or length > MAX_MARK_BYTES:
            _unreadable(claims, view, name, "a directory" if kind != "FILE" else f"{length} bytes")
            continue
        if length == 0:
            if not switched:  # claims are written whole (mark): an empty one was left by a crash
                _unreadable(claims, view, name, "empty: a claim whose write was interrupted")
                if empty is not None:
                    empty.add(view)
            continue
        data = fs.read(f"{directory}/{name}", max_bytes=MAX_MARK_BYTES)
        if data is None:  # deleted since the listing
            return None
        try:
            mark = ReplayMark.from_json(view, data)
            if switched and (not mark.switched or str(mark.started_ms) != found["started"]):
                raise ValueError("not the switched replay its name says")
        except ValueError as exc:
            _unreadable(claims, view, name, str(exc))
            continue
        if not switched:  # a broken file of the view read before keeps it refused, with this holder
            broken = claims.get(view)
            claims[view] = replace(mark, from_ms=0, unreadable=broken.unreadable) if broken else mark
        elif view not in overlays or mark.started_ms > overlays[view].started_ms:
            overlays[view] = mark
    return claims, overlays


def _unreadable(claims: dict[str, ReplayMark], view: str, name: str, why: str) -> None:
    """Mark the view's claim (its readable one, if any: its holder and rows stay known) unreadable,
    from 0: a `--resume` replays from the cutoff, since the broken file's range is unknown."""
    log.warning("replay mark %s is not one (%s): %s is refused until `lambdactl replay --resume`", name, why, view)
    claims[view] = replace(claims.get(view) or ReplayMark(view, 0, 0), from_ms=0, unreadable=f"{name}: {why}")


def mark(
    settings: Settings,
    view: str,
    from_ms: int,
    started_ms: int,
    take_over: bool = False,
    shadow: str = "",
    replaces: tuple[int, ...] = (),
    short: bool = False,
) -> ReplayMark:
    """Claim the view's mark (unswitched); ReplayMarked when it is held and `take_over` is False.
    `replaces`: the started_ms of the claims a take-over replaces (ReplayMark.replaces); `short`:
    whether one of them left the view's own rows short (ReplayMark.short)."""
    from stores.webhdfs import WebHdfs, WebHdfsError

    path = f"{marks_dir(settings)}/{view}.json"
    ticks, boot = start_ticks(os.getpid()), boot_id()
    if ticks is None or not boot:  # no /proc: the claim names its holder as an earlier release's did
        ticks, boot = None, ""
    claimed = ReplayMark(
        view,
        from_ms,
        started_ms,
        shadow,
        host=socket.gethostname(),
        pid=os.getpid(),
        pid_start_ticks=ticks,
        boot_id=boot,
        replaces=replaces,
        short=short,
    )
    data = claimed.to_json()
    moved_away = False
    with WebHdfs(settings) as fs:
        fs.mkdirs(marks_dir(settings))
        if any(n == f"{view}.json" and k != "FILE" for n, k, _ in fs.entries(marks_dir(settings))):
            if not take_over:  # a move onto a directory would go into it
                raise ReplayMarked(
                    f"{path} is a directory, no mark: `lambdactl replay --view {view} --resume` replaces it"
                )
            fs.delete(path, recursive=True)  # a directory under the claim's name (no mark): replaced
            moved_away = True
        # Written beside it, then moved in one step (a name no mark has: listings skip it): a claim
        # being written shows as empty, and one killed half-way would stay so. A move without
        # overwrite fails when the claim is there: the first replay to move its file holds it.
        written = f"{path}.tmp-{claimed.started_ms}-{os.getpid()}"
        fs.write(written, data)
        # An unreadable claim of no holder (replaces[0] == 0), no claim file, and a file under an
        # overlay's name that is none: the claim is created as a first replay's (no overwrite); its
        # switch deletes that file. (A broken claim file deleted since: a `--resume` took it; refused.)
        if take_over and not (
            replaces[:1] == (0,)
            and not moved_away
            and fs.read(path) is None
            and _broken_overlay_left(fs, marks_dir(settings), view)
        ):
            # Only over the claim this one was planned to take over (replaces[0]): one a `--cancel`
            # released meanwhile stays released (its rows may be being deleted), one another replay made
            # stays its. (No compare-and-set on WebHDFS: this narrows the race to the instant between.)
            if replaces and not moved_away and not _holds(fs, path, ReplayMark(view, 0, replaces[0])):
                fs.delete(written)
                raise ReplayMarked(
                    f"{view}'s claim changed since this `--resume` read it (a `--cancel`, or another replay "
                    "claimed the view): nothing was taken over; look again with `lambdactl status`"
                )
            fs.replace(written, path)
            return claimed
        if not fs.rename(written, path):
            fs.delete(written)
            held = fs.read(path)
            if held is None:
                raise WebHdfsError(f"could not move the replay claim {written} to {path}")
            raise ReplayMarked(
                f"a replay of {view} holds its mark ({held.decode(errors='replace')[:200]}): it is running, or "
                f"it was interrupted; when none runs, `lambdactl replay --view {view} --resume` takes over"
            ) from None
    return claimed


def switch(settings: Settings, claim: ReplayMark, split_ms: int) -> ReplayMark:
    """Switch the view's answers to the claim's shadow rows (ReplayMarked when the view's claim is
    neither this one nor a `--resume` that took this one over: it was cancelled): its overlay file
    appears, then the view's other overlays (which the claim's rows cover, and whose start is
    earlier: lambdactl/replay.py starts a replay after every mark it read) and the claim are deleted."""
    from stores.webhdfs import WebHdfs

    switched = ReplayMark(claim.view, claim.from_ms, claim.started_ms, claim.shadow, split_ms)
    directory = marks_dir(settings)
    refused = ReplayMarked(
        f"the replay mark of {claim.view} is no longer this replay's (cancelled with `lambdactl replay "
        f"--cancel`, or another replay claimed the view since): not switched; the rows it wrote "
        f"({claim.shadow}) are read by no answer; the realtime clean-up after a later batch run deletes them"
    )
    overlay = _overlay_path(settings, claim.view, claim.started_ms)
    with WebHdfs(settings) as fs:
        if not _answers_for(fs, f"{directory}/{claim.view}.json", claim):
            raise refused
        # Written beside it, then moved over it in one step: one killed half-way leaves no overlay.
        fs.write_whole(overlay, switched.to_json())
        # A `--cancel` may have released the claim between the check and the write (it deletes the
        # rows once it has waited and seen no overlay): the overlay is taken back, the cancel wins.
        if not _answers_for(fs, f"{directory}/{claim.view}.json", claim):
            fs.delete(overlay)
            raise refused
        for name, kind, length in fs.entries(directory):
            found = _mark_name(name)
            if not found or found["view"] != claim.view or not found["switched"]:
                continue
            started = int(found["started"])
            if (
                started < claim.started_ms
                or _overlay_at(fs, f"{directory}/{name}", claim.view, started, kind, length) is None
            ):
                # older (the claim's rows cover it), or a file under an overlay's name that is none
                fs.delete(f"{directory}/{name}", recursive=kind != "FILE")
        if _holds(fs, f"{directory}/{claim.view}.json", claim):
            fs.delete(f"{directory}/{claim.view}.json")
    return switched


def _overlay_at(fs, path: str, view: str, started: int, kind: str, length: int) -> ReplayMark | None:
    """The overlay in the file at `path`, under an overlay's name of `view` started at `started`, as
    read_replays takes it (a switched mark of that start); None for anything else, which keeps the
    view refused as an unreadable claim until a `--resume` switches (or, retired, its mark goes)."""
    if kind != "FILE" or not 0 < length <= MAX_MARK_BYTES:
        return None
    data = fs.read(path, max_bytes=MAX_MARK_BYTES)
    try:
        mark = ReplayMark.from_json(view, data) if data is not None else None
    except ValueError:
        return None
    return mark if mark is not None and mark.switched and mark.started_ms == started else None


def _broken_overlay_left(fs, directory: str, view: str) -> bool:
    """Whether a file under one of `view`'s overlay names is no overlay (_overlay_at)."""
    for name, kind, length in fs.entries(directory):
        found = _mark_name(name)
        if found and found["view"] == view and found["switched"]:
            if _overlay_at(fs, f"{directory}/{name}", view, int(found["started"]), kind, length) is None:
                return True
    return False


def _answers_for(fs, path: str, claim: ReplayMark, take_overs: bool = True) -> bool:
    """Whether the claim file is `claim`'s, or (`take_overs`) a `--resume`'s that took `claim` over."""
    data = fs.read(path, max_bytes=MAX_MARK_BYTES)
    if data is None:
        return False
    try:
        current = ReplayMark.from_json(claim.view, data)
    except ValueError:
        return True  # no mark: not another replay's claim either
    return current.started_ms == claim.started_ms or (take_overs and claim.started_ms in current.replaces)


def holds(settings: Settings, claim: ReplayMark) -> bool:
    """Whether the view's claim file is still `claim` (not taken over by a `--resume` since)."""
    from stores.webhdfs import WebHdfs

    with WebHdfs(settings) as fs:
        return _holds(fs, f"{marks_dir(settings)}/{claim.view}.json", claim)


def _holds(fs, path: str, claim: ReplayMark) -> bool:
    """Whether the claim file is still `claim`'s (a `--resume` elsewhere may have taken it over since)."""
    return _answers_for(fs, path, claim, take_overs=False)


def _overlay_path(settings: Settings, view: str, started_ms: int) -> str:
    return f"{marks_dir(settings)}/{view}{SWITCHED}{started_ms}.json"


def release(settings: Settings, claim: ReplayMark) -> bool:
    """Delete the view's claim if it is still `claim` (not taken over by a `--resume` since): whether it was."""
    from stores.webhdfs import WebHdfs

    path = f"{marks_dir(settings)}/{claim.view}.json"
    with WebHdfs(settings) as fs:
        if not _holds(fs, path, claim):
            return False
        fs.delete(path)
    return True


def unmark(settings: Settings, view: str) -> None:
    """Delete the view's claim."""
    from stores.webhdfs import WebHdfs

    with WebHdfs(settings) as fs:
        fs.delete(f"{marks_dir(settings)}/{view}.json", recursive=True)  # a directory there is no mark either
