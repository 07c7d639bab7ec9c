"""Which replays' rows no replay mark names any more (lambdactl.replay_orphans.unreferenced_shadows), which the
realtime clean-up deletes (lambdactl/replay_orphans.py; on the real stores in
tests/integration/speed/test_replay_orphans.py); without a store: the marks are given."""

from __future__ import annotations

from lambdactl.replay_orphans import unreferenced_shadows
from stores.replays import ReplayMark, shadow_name

V, W = "page_views", "top_pages"


def claim(view: str, started: int, replaces: tuple[int, ...] = (), unreadable: str = "") -> ReplayMark:
    return ReplayMark(view, 0, started, shadow_name(view, started), replaces=replaces, unreadable=unreadable)


def overlay(view: str, started: int) -> ReplayMark:
    return ReplayMark(view, 0, started, shadow_name(view, started), split_ms=started + 60_000)


def test_rows_of_a_replay_nothing_refers_to_are_unreferenced_and_views_own_rows_never_are():
    names = {V, W, shadow_name(V, 100), shadow_name(W, 200), "page_views_by_channel"}
    assert unreferenced_shadows(names, {}, {}) == {shadow_name(V, 100), shadow_name(W, 200)}


def test_a_claims_rows_an_overlays_rows_and_the_rows_a_resume_took_over_are_kept():
    names = {shadow_name(V, t) for t in (100, 200, 300, 400)} | {shadow_name(W, 500), shadow_name(W, 600)}
    claims = {V: claim(V, 400, replaces=(200, 300))}  # a --resume that took over 300, which had taken 200
    overlays = {W: overlay(W, 600)}  # the newest switched replay of W; 500 is an older one it replaced
    assert unreferenced_shadows(names, claims, overlays) == {shadow_name(V, 100), shadow_name(W, 500)}


def test_no_row_of_a_view_whose_claim_cannot_be_read_or_is_empty_is_unreferenced():
    # The claim file is no mark, or still empty: the replay it was written for may still run, and may switch.
    names = {shadow_name(V, 100), shadow_name(W, 100), shadow_name("unique_visitors", 100)}
    claims = {V: ReplayMark(V, 0, 0, unreadable="page_views.json: not JSON (JSONDecodeError)")}
    assert unreferenced_shadows(names, claims, {}) == {shadow_name(W, 100), shadow_name("unique_visitors", 100)}
    assert unreferenced_shadows(names, claims, {}, claims_being_written={W}) == {shadow_name("unique_visitors", 100)}


def test_names_that_only_look_like_replay_rows_are_left_alone():
    names = {"~replay-100", f"{V}~replay-", f"{V}~replay-12x", f"{V}~replay-+5", f"{V}~replay-٣"}
    assert unreferenced_shadows(names, {}, {}) == set()


def test_a_clean_up_pass_that_failed_says_so_in_its_json():
    from lambdactl.replay_orphans import Orphans

    assert Orphans().as_json() == {"names": [], "rows": 0, "complete": True}
    assert Orphans(error="WebHdfsError: down").as_json() == {
        "names": [],
        "rows": 0,
        "complete": False,
        "error": "WebHdfsError: down",
    }
