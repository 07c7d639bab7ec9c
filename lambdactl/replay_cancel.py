"""`lambdactl replay --view V --cancel`: give up an interrupted replay of a view (lambdactl/replay.py).

The claim goes first, so the replay, if it still runs elsewhere, is refused at its switch
(stores.replays.switch); then the rows it wrote are deleted as any replay's rows no mark names are
(lambdactl/replay_orphans.py): only if no mark names them when read after the release and again
`replaced_rows_kept_s` later. A replay elsewhere that read the claim just before it went, and
switched meanwhile, keeps them; so does a `--resume` that took the claim over meanwhile.
"""

from __future__ import annotations

import time

from definitions.settings import Settings
from lambdactl.replay import Refused, running_holder


def cancel(settings: Settings, name: str) -> dict:
    """Take off the claim of an interrupted replay of view `name` and delete the rows it wrote (no
    answer read them: it never switched); the view then answers as before with nothing replaying.
    Refused (changing nothing) when no replay holds the view, its holder still runs on this host, or
    the claim is one `--resume` must finish (an unreadable mark, an earlier release's in-place replay)."""
    from lambdactl.replay_orphans import delete_orphaned_replays
    from lambdactl.views import refresh_api
    from stores import replays
    from stores.view_versions import read_versions

    claims = replays.read_replays(settings)[0]
    if name in claims:  # a storage name, or a view's name its claim is under
        held_names = [name]
    else:
        try:  # a view's name stands for the storage names of its served and pending definitions
            names = read_versions(settings).storages([name])
        except Exception:  # noqa: BLE001 - undeclared, or the stores cannot say: the name as given
            names = [name]
        held_names = [n for n in names if n in claims]
    if not held_names:
        raise Refused(f"no replay holds {name}'s mark: there is nothing to cancel")
    if len(held_names) > 1:
        raise Refused(f"replays hold the marks of {', '.join(held_names)}: cancel one of them by that name")
    view, held = held_names[0], claims[held_names[0]]
    if held.unreadable:
        raise Refused(f"{view}'s replay mark is not one ({held.unreadable[:200]}): only `--resume` replaces it")
    if not held.shadow:
        raise Refused(
            f"{view} is claimed by a replay of an earlier release, which rewrote its rows in place: only "
            "`--resume` makes them exact again"
        )
    if held.short:
        raise Refused(
            f"{view}'s own rows are short (the replay holding its mark took over one that rewrote them in "
            "place, or an unreadable one): only `--resume` makes them exact again"
        )
    pid = running_holder(held)
    if pid is not None:
        raise Refused(f"the replay holding {view}'s mark still runs (pid {pid} on this host): stop it, then `--cancel`")
    if not replays.release(settings, held):
        raise Refused(f"{view}'s mark changed meanwhile (another `--resume` or `--cancel`): look again")
    try:
        refresh_api(settings)
        orphans = delete_orphaned_replays(settings, [held.shadow], wait=_settle)
        if held.shadow not in orphans.names:  # a mark named its rows while the cancel looked
            return {"view": view, "shadow": held.shadow, "rows_deleted": 0, **_why_kept(settings, held)}
    except Exception as exc:
        raise CancelIncomplete(
            {"view": view, "shadow": held.shadow, "rows_deleted": 0, "switched": False, "complete": False},
            f"{view}'s replay mark is off, but its rows ({held.shadow}) could not be checked and deleted: "
            f"{type(exc).__name__}: {str(exc)[:300]}; unless its replay switched meanwhile, no answer reads them, and "
            "the realtime clean-up after a later batch run deletes them",
        ) from None
    done = {"view": view, "shadow": held.shadow, "rows_deleted": orphans.rows, "switched": False}
    if not orphans.complete:
        raise CancelIncomplete(
            {**done, "complete": False},
            f"{view}'s replay mark is off; {orphans.rows:,} of its rows ({held.shadow}) were deleted, and some "
            "token ranges could not be read: no answer reads the rest, and the realtime clean-up after a later "
            "batch run deletes it",
        )
    return done


def _why_kept(settings: Settings, held) -> dict:
    """Why rows the cancel found named are kept: its replay switched to them, a `--resume` took its
    claim over, or (neither, now) a mark named them for a moment: a switch taken back, a claim being
    written; no answer reads them, and the realtime clean-up deletes them once no mark names them."""
    from stores import replays

    claims, overlays = replays.read_replays(settings)
    if any(m.shadow == held.shadow for m in overlays.values()):
        return {"switched": True}
    if any(held.started_ms in (c.started_ms, *c.replaces) for c in claims.values() if c.view == held.view):
        return {"switched": False, "kept": "taken_over"}
    return {"switched": False, "kept": "named_meanwhile"}


def _settle(seconds: float) -> None:
    time.sleep(seconds)


class CancelIncomplete(Exception):
    """A cancelled replay's claim is off, but not all of its rows could be deleted: `summary` says how far."""

    def __init__(self, summary: dict, message: str) -> None:
        super().__init__(message)
        self.summary = summary
