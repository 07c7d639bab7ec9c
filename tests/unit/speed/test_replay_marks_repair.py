"""Replay mark files a crash or a damaged file left behind never block a view for good: a file under
an overlay's name that is no overlay is replaced by `--resume`, a retired view's marks all go, and
overlays older than the newest are taken away with it. Files on a stand-in HDFS (WritableFs)."""

from __future__ import annotations

import pytest

from lambdactl.replay_rules import taken_over
from tests.unit.speed.test_replay_rules import WritableFs


@pytest.fixture
def files(monkeypatch) -> dict:
    from stores import webhdfs

    held: dict = {}
    monkeypatch.setattr(webhdfs, "WebHdfs", lambda _settings: WritableFs(held))
    return held


def test_a_broken_file_under_an_overlays_name_with_no_claim_is_replaced_by_resume(settings, files):
    """Such a file refuses the view like an unreadable claim (409) until `--resume`; with no claim
    file beside it, the resume used to be refused as "the claim changed since this `--resume` read
    it", at every try, and `--cancel` refuses unreadable claims: the view stayed refused for good."""
    from stores import replays

    files["page_views.switched-5.json"] = b"[1]"
    held = replays.read_replays(settings)[0]["page_views"]
    assert held.unreadable and held.rows_short
    claim = replays.mark(
        settings,
        "page_views",
        0,
        70,
        take_over=True,
        shadow=replays.shadow_name("page_views", 70),
        replaces=taken_over([held]),
        short=held.rows_short,
    )
    assert replays.ReplayMark.from_json("page_views", files["page_views.json"]) == claim
    replays.switch(settings, claim, 120_000)
    claims, overlays = replays.read_replays(settings)
    assert claims == {} and overlays["page_views"].shadow == claim.shadow
    assert set(files) == {"page_views.switched-70.json"}, "the switch deleted the file that was no overlay"


def test_a_resume_that_finds_another_claim_made_meanwhile_still_refuses(settings, files):
    from stores import replays

    files["page_views.switched-5.json"] = b"[1]"
    held = replays.read_replays(settings)[0]["page_views"]
    other = replays.ReplayMark("page_views", 0, 60, replays.shadow_name("page_views", 60))
    files["page_views.json"] = other.to_json()  # another `--resume` took the view first
    with pytest.raises(replays.ReplayMarked, match="changed since"):
        replays.mark(settings, "page_views", 0, 70, take_over=True, shadow="x", replaces=taken_over([held]))
    assert files["page_views.json"] == other.to_json()


def test_every_overlay_of_a_view_is_found_not_only_the_newest_and_all_their_files_go(settings, files):
    """A switch killed before it deleted the overlays it replaced leaves an older one beside the newer:
    a retired view's clean-up must delete both replays' rows and files, or the older one becomes the
    newest, its rows and file stay for good, and `reset-speed` is refused by it."""
    from stores import replay_cleanup, replays

    older = replays.ReplayMark("old", 0, 5, replays.shadow_name("old", 5), 60_000)
    newer = replays.ReplayMark("old", 0, 9, replays.shadow_name("old", 9), 120_000)
    other = replays.ReplayMark("page_views", 0, 6, replays.shadow_name("page_views", 6), 60_000)
    files.update(
        {
            "old.switched-5.json": older.to_json(),
            "old.switched-9.json": newer.to_json(),
            "old.switched-7.json": b"not a mark",
            "page_views.switched-6.json": other.to_json(),
        }
    )
    assert replay_cleanup.overlays_of(settings, ["old"]) == [older, newer]
    replay_cleanup.drop_overlays_of(settings, ["old"])
    assert set(files) == {"page_views.switched-6.json"}
    assert replays.read_replays(settings) == ({}, {"page_views": other})


def test_dropping_a_finished_overlay_drops_the_older_ones_it_covered(settings, files):
    from stores import replay_cleanup, replays

    older = replays.ReplayMark("page_views", 0, 5, replays.shadow_name("page_views", 5), 60_000)
    newer = replays.ReplayMark("page_views", 0, 9, replays.shadow_name("page_views", 9), 120_000)
    files.update({"page_views.switched-5.json": older.to_json(), "page_views.switched-9.json": newer.to_json()})
    assert replays.read_overlays(settings) == {"page_views": newer}
    replay_cleanup.drop_overlay(settings, newer)
    assert files == {}, "the older overlay no longer becomes the newest once the newer is gone"


@pytest.mark.parametrize("claim_file", [None, b"{broken", "readable"])
def test_a_retired_views_claim_and_broken_overlay_files_go_and_its_overlays_stay_for_the_clean_up(
    settings, files, claim_file
):
    from stores import replay_cleanup, replays

    switched = replays.ReplayMark("old", 0, 3, replays.shadow_name("old", 3), 60_000)
    files.update({"old.switched-5.json": b"[1]", "old.switched-3.json": switched.to_json()})
    if claim_file == "readable":
        claim_file = replays.ReplayMark("old", 0, 8, replays.shadow_name("old", 8)).to_json()
    if claim_file is not None:
        files["old.json"] = claim_file
    held = replays.read_replays(settings)[0]["old"]
    replay_cleanup.forget_claim(settings, held)
    assert replays.read_replays(settings) == ({}, {"old": switched}), "no claim is left to refuse the clean-up"
    assert set(files) == {"old.switched-3.json"}


def test_a_retired_views_claim_taken_over_meanwhile_is_not_taken_off(settings, files):
    from stores import replay_cleanup, replays

    files["old.json"] = replays.ReplayMark("old", 0, 8, replays.shadow_name("old", 8)).to_json()
    held = replays.read_replays(settings)[0]["old"]
    files["old.json"] = later = replays.ReplayMark("old", 0, 9, replays.shadow_name("old", 9), replaces=(8,)).to_json()
    with pytest.raises(replays.ReplayMarked, match="changed"):
        replay_cleanup.forget_claim(settings, held)
    assert files == {"old.json": later}


def test_a_resume_planned_on_a_broken_claim_that_went_since_still_refuses(settings, files):
    """Read as unreadable because the claim file itself was broken; a `--resume` elsewhere took it over
    and switched meanwhile (the file is gone, no broken overlay file is left): nothing to take over."""
    from stores import replays

    files["page_views.json"] = b"{broken"
    held = replays.read_replays(settings)[0]["page_views"]
    del files["page_views.json"]
    with pytest.raises(replays.ReplayMarked, match="changed since"):
        replays.mark(settings, "page_views", 0, 70, take_over=True, shadow="x", replaces=taken_over([held]))
    assert "page_views.json" not in files


def test_a_claim_made_between_the_check_and_the_move_is_kept(settings, monkeypatch, files):
    from stores import replays

    files["page_views.switched-5.json"] = b"[1]"
    held = replays.read_replays(settings)[0]["page_views"]
    other = replays.ReplayMark("page_views", 0, 60, replays.shadow_name("page_views", 60)).to_json()
    rename = WritableFs.rename

    def another_claims_then_rename(self, source, destination):
        self.files["page_views.json"] = other  # a first replay's claim lands just after the check
        return rename(self, source, destination)

    monkeypatch.setattr(WritableFs, "rename", another_claims_then_rename)
    with pytest.raises(replays.ReplayMarked, match="holds its mark"):
        replays.mark(settings, "page_views", 0, 70, take_over=True, shadow="x", replaces=taken_over([held]))
    assert files["page_views.json"] == other


def test_a_switched_mark_under_another_start_than_its_name_says_goes_with_a_retired_views_claim(settings, files):
    from stores import replay_cleanup, replays

    misnamed = replays.ReplayMark("old", 0, 3, replays.shadow_name("old", 3), 60_000)
    files["old.switched-4.json"] = misnamed.to_json()
    held = replays.read_replays(settings)[0]["old"]
    assert held.unreadable, "read as no overlay: the view stays claimed"
    replay_cleanup.forget_claim(settings, held)
    assert files == {} and replays.read_replays(settings) == ({}, {})


def test_a_claim_made_after_a_broken_one_was_read_is_not_taken_off_as_a_retired_views(settings, files):
    from stores import replay_cleanup, replays

    files["old.json"] = b"{broken"
    held = replays.read_replays(settings)[0]["old"]
    files["old.json"] = claim = replays.ReplayMark("old", 0, 9, replays.shadow_name("old", 9)).to_json()
    with pytest.raises(replays.ReplayMarked, match="changed"):
        replay_cleanup.forget_claim(settings, held)
    assert files == {"old.json": claim}
