"""A replay's switch writes its overlay file whole, on the real HDFS: one killed while writing it
left part of the file under the overlay's name (the view answered 409 until a `--resume`), and
once HDFS recovered the file's lease, possibly an overlay naming rows a `--cancel` had deleted."""

from __future__ import annotations

import pytest

from stores.replays import mark, read_replays, shadow_name, switch
from stores.webhdfs import WebHdfs

V = "page_views"


class Killed(BaseException):
    """The process ends here (kill -9 between the write's bytes)."""


def test_a_switch_killed_while_writing_its_overlay_leaves_the_claim_and_no_overlay(
    settings, stack, unique, monkeypatch, request
):
    mine = settings.model_copy(
        update={"speed": settings.speed.model_copy(update={"checkpoint_dir": f"/lambda/test-switch-{unique}/speed"})}
    )

    def remove() -> None:
        with WebHdfs(mine) as fs:
            fs.delete(f"/lambda/test-switch-{unique}", recursive=True)

    request.addfinalizer(remove)
    claim = mark(mine, V, 0, 3_000, shadow=shadow_name(V, 3_000))
    real = WebHdfs.write

    def killed_half_way(self, path, data, overwrite=True):
        real(self, path, data[: len(data) // 2], overwrite)
        raise Killed

    monkeypatch.setattr(WebHdfs, "write", killed_half_way)
    with pytest.raises(Killed):
        switch(mine, claim, 3_060_000)
    monkeypatch.undo()
    claims, overlays = read_replays(mine)
    assert V not in overlays, "no overlay: the view answers from its own rows, as before the switch"
    assert claims[V].started_ms == 3_000 and not claims[V].unreadable, "the claim stands: `--resume` goes on"
    switched = switch(mine, claim, 3_060_000)  # switched again, by the same claim
    assert read_replays(mine)[1][V] == switched and switched.split_ms == 3_060_000
