"""What a replay does at its switch and after it (lambdactl/replay.py runs the replay): switch the
view's answers to the replayed rows, say so when the switch fails after its overlay is written,
and delete the rows of the replays it replaced once no answer reads them."""

from __future__ import annotations

import time

from definitions.settings import Settings
from lambdactl.output import _say


class SwitchUnfinished(Exception):
    """The switch wrote the replay's overlay, so the view answers from the replayed rows, and then
    failed (deleting older overlays or the claim): not a replay that left the view as it was."""


def switched_to(settings: Settings, claim, split_ms: int) -> None:
    """stores.replays.switch, and when it fails part-way, whether its overlay was written: a switch
    that fails after that answers from the replayed rows already (SwitchUnfinished says so)."""
    from stores.replays import ReplayMarked, read_overlays, switch

    try:
        switch(settings, claim, split_ms)
    except ReplayMarked:
        raise
    except (Exception, KeyboardInterrupt) as exc:  # Ctrl-C too: after the overlay, the view answers from the replay
        why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {str(exc)[:300]}"
        try:
            overlay = read_overlays(settings).get(claim.view)
        except Exception:  # noqa: BLE001 - HDFS away: whether the overlay was written cannot be told
            raise SwitchUnfinished(
                f"{claim.view}: the switch failed ({why}) and whether it wrote its "
                "overlay cannot be read: `lambdactl views` says whether the view answers from the replayed rows; "
                f"`lambdactl replay --view {claim.view} --cancel` takes a claim left off (keeping rows an overlay reads)"
            ) from None
        if overlay is None or overlay.started_ms != claim.started_ms:
            raise
        raise SwitchUnfinished(
            f"{claim.view}: switched (it answers from the replayed rows), but the switch could not finish "
            f"({why}): older overlays or the claim may be left; `lambdactl replay "
            f"--view {claim.view} --cancel` takes the claim off and keeps the rows, `lambdactl clean-realtime` "
            "deletes rows no answer reads"
        ) from None


def delete_replaced(settings: Settings, view: str, old_rows: list[str]) -> int:
    """Delete the rows of the replays a switched replay replaced (no answer reads them once every
    API worker read the marks again): the rows deleted."""
    from serving_layer.speed_state import replaced_rows_kept_s
    from stores.realtime_cleanup import delete_view_from

    if not old_rows:
        return 0
    # Every API worker has read the replay marks again by then, even one whose read just now failed
    # or raced with the switch, or refuses the view: the replaced rows are read by none.
    settle_s = replaced_rows_kept_s(settings)
    _say(f"{view}: deleting the replaced replays' rows in {settle_s:.0f}s, once no API worker reads them")
    time.sleep(settle_s)
    deleted = 0
    for old in old_rows:
        cleaned = delete_view_from(settings, old, 0, time.time_ns() // 1000)
        deleted += cleaned.rows_below_cutoff
        if not cleaned.complete:  # no answer reads them; `lambdactl clean-realtime` deletes orphans
            _say(
                f"{view}: rows of the replaced replay {old} are left in {len(cleaned.unreadable)} token range(s) "
                "that could not be cleaned; no answer reads them, and a later clean-up deletes them"
            )
    return deleted
