"""What the realtime clean-ups do with replay marks (stores.replays): which replayed rows they delete
below a view's cutoff, and the overlay files they take away once no answer reads them, older ones
and files under an overlay's name that are none included (a switch killed half-way leaves those);
and a retired view's marks, which nothing can finish."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from definitions.settings import Settings
from stores.replays import (
    MAX_MARK_BYTES,
    ReplayMark,
    ReplayMarked,
    _mark_name,
    _overlay_at,
    marks_dir,
)


def overlay_cutoffs(overlays: dict[str, ReplayMark], cutoffs_s: dict[str, int]) -> tuple[dict[str, int], list]:
    """For the clean-up: ({shadow name: cutoff (s)}, the overlays no answer reads any more). A shadow's
    rows below its view's cutoff are never read, like the view's own; an overlay whose split the
    cutoff reached is read no more (serving_layer/replay_overlay.py). A view without a cutoff keeps all."""
    shadows: dict[str, int] = {}
    finished = []
    for view, overlay in sorted(overlays.items()):
        cutoff = cutoffs_s.get(view)
        if cutoff is None or not overlay.shadow:
            continue
        shadows[overlay.shadow] = cutoff
        if overlay.split_ms is not None and cutoff * 1000 >= overlay.split_ms:
            finished.append(overlay)
    return shadows, finished


def drop_overlay(settings: Settings, overlay: ReplayMark) -> None:
    """Delete an overlay file (its shadow rows must no longer be read: the view's cutoff passed it),
    and the view's older ones, which it covered: left by a switch killed before it deleted them, one
    would otherwise become the view's newest. Their rows, no longer named, go as orphans
    (lambdactl/replay_orphans.py)."""
    _drop(settings, [overlay.view], lambda fs, path, started, kind, length: started > overlay.started_ms)


def overlays_of(settings: Settings, views: Iterable[str]) -> list[ReplayMark]:
    """Every overlay of `views`, not only the newest (read_overlays), oldest first: a retired view's
    clean-up deletes the rows of each."""
    from stores.webhdfs import WebHdfs

    wanted, found = set(views), []
    directory = marks_dir(settings)
    with WebHdfs(settings) as fs:
        for name, kind, length in sorted(fs.entries(directory)):
            parts = _mark_name(name)
            if parts is None or parts["view"] not in wanted or not parts["switched"]:
                continue
            path = f"{directory}/{name}"
            overlay = _overlay_at(fs, path, parts["view"], int(parts["started"]), kind, length)
            if overlay is not None:
                found.append(overlay)
    return sorted(found, key=lambda m: (m.view, m.started_ms))


def drop_overlays_of(settings: Settings, views: Iterable[str]) -> None:
    """Delete every file under an overlay's name of `views` (retired: their rows were deleted)."""
    _drop(settings, views)


def forget_claim(settings: Settings, held: ReplayMark) -> None:
    """Take off a retired view's claim `held` (as read_replays gave it), and the files under the
    view's overlay names that are no overlay (they keep it claimed): no replay can finish a view the
    speed layer no longer maintains. Its overlays stay: the retiring clean-up deletes their rows,
    then them. ReplayMarked, changing nothing, when the claim is another than `held` now (a
    `--resume` took it over, or a replay claimed the view after a broken claim was read)."""
    from stores.webhdfs import WebHdfs

    directory = marks_dir(settings)
    name = f"{held.view}.json"
    with WebHdfs(settings) as fs:
        kind = next((k for n, k, _ in fs.entries(directory) if n == name), None)
        data = fs.read(f"{directory}/{name}", max_bytes=MAX_MARK_BYTES) if kind == "FILE" else None
        if data is not None and not _still(held, data):
            raise ReplayMarked(f"{held.view}'s replay mark changed since it was read (another replay): look again")
        if kind is not None:
            fs.delete(f"{directory}/{name}", recursive=kind != "FILE")  # a directory there is no mark either
    _drop(
        settings,
        [held.view],
        lambda fs, path, started, kind, length: _overlay_at(fs, path, held.view, started, kind, length) is not None,
    )


def _still(held: ReplayMark, data: bytes) -> bool:
    """Whether the claim file's `data` is still what `held` was read from: no mark (still broken), or
    `held`'s own claim."""
    try:
        current = ReplayMark.from_json(held.view, data)
    except ValueError:
        return True
    return bool(held.started_ms) and current.started_ms == held.started_ms


def _drop(settings: Settings, views: Iterable[str], keep: Callable[..., bool] | None = None) -> None:
    """Delete the files under an overlay's name of `views`, but those `keep(fs, path, started_ms,
    kind, length)` says to keep."""
    from stores.webhdfs import WebHdfs

    wanted = set(views)
    directory = marks_dir(settings)
    with WebHdfs(settings) as fs:
        for name, kind, length in fs.entries(directory):
            parts = _mark_name(name)
            if parts is None or parts["view"] not in wanted or not parts["switched"]:
                continue
            path = f"{directory}/{name}"
            if keep is None or not keep(fs, path, int(parts["started"]), kind, length):
                fs.delete(path, recursive=kind != "FILE")
