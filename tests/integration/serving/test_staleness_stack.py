"""Batch runs stopped past the realtime rows' TTL (the one the stack's tables record): answers, the
status route and `lambdactl status` say `complete: false` and why, on the real stores, with the
clock moved forward (no one waits three days). The speed layer's start is a marker of this test's own on real HDFS; the pointer is
the stack's."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.routes.health import forget_health
from definitions.settings import Settings
from definitions.times import iso_s
from serving_layer.service import ServingLayer
from stores.batch_views import VersionStore
from stores.checkpoints import marker_path, read_marker, write_marker
from stores.realtime_schema import read_ttl_changes
from stores.realtime_ttl import earliest_expiry
from stores.webhdfs import WebHdfs
from tests.support.tripwire_api import LOCAL_URL

VIEW = "page_views"


class ClockShifted(ServingLayer):
    shift_s = 0

    def now_s(self) -> int:
        return int(time.time()) + self.shift_s


@pytest.fixture
def own_marker(settings: Settings, stack, unique) -> Iterator[Settings]:
    """The stack's settings with a speed layer that started an hour ago (its marker, written to HDFS
    under a checkpoint path of this test). The realtime rows' TTL is the stack's tables' (answers
    follow the TTL the tables record, not a setting: stores/realtime_ttl.py)."""
    speed = settings.speed.model_copy(update={"checkpoint_dir": f"/lambda/test/stale-{unique}"})
    mine = settings.model_copy(update={"speed": speed})
    write_marker(mine, started_ms=int(time.time() - 3_600) * 1000, dedupe=None, cells=None)
    yield mine
    with WebHdfs(settings) as fs:
        fs.delete(marker_path(mine))


def stale_from_s(settings: Settings) -> float:
    """When answers of VIEW turn incomplete: the margin before its oldest realtime row could expire."""
    pointer = VersionStore(settings).pointer()
    cutoff_ms = pointer.source(VIEW).cutoff_ms if pointer else 0
    marker = read_marker(settings)
    assert marker is not None and marker.started_ms is not None
    record = read_ttl_changes(settings)  # what the realtime tables' comments and TTL say
    assert record, "the stack's realtime tables exist"
    expiry_s, _, _ = earliest_expiry(record, max(cutoff_ms, marker.started_ms))
    return expiry_s - settings.speed.stale_margin_s


@pytest.fixture
def client(own_marker: Settings) -> Iterator[TestClient]:
    app = create_app(own_marker)
    with TestClient(app, base_url=LOCAL_URL, raise_server_exceptions=False) as client:
        app.state.serving.close()
        app.state.serving = ClockShifted(own_marker)
        yield client
        app.state.serving.close()


def page_views(client: TestClient, start_s: int, end_s: int) -> dict:
    resp = client.get(
        f"/api/v1/views/{VIEW}",
        params={"url": "/", "granularity": "hour", "start": iso_s(start_s), "end": iso_s(end_s)},
    )
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_answers_turn_incomplete_with_the_reason_when_realtime_rows_could_expire(client, own_marker):
    now = int(time.time())
    start, end = now - now % 3_600 - 86_400, now - now % 3_600 + 3_600
    serving: ClockShifted = client.app.state.serving
    fresh = page_views(client, start, end)
    assert fresh["provenance"]["complete"] is True and fresh["provenance"]["reasons"] == []

    serving.shift_s = int(stale_from_s(own_marker) - now) - 60  # a minute before: still complete
    assert page_views(client, start, end)["provenance"]["complete"] is True

    serving.shift_s = int(stale_from_s(own_marker) - now) + 1
    stale = page_views(client, start, end)
    assert stale["provenance"]["complete"] is False
    [reason] = stale["provenance"]["reasons"]
    assert reason.startswith("stale: ") and VIEW in reason and "`lambdactl batch`" in reason
    assert [b["batch"] for b in stale["series"]] == [b["batch"] for b in fresh["series"]], (
        "the same stores are read: only the flag differs"
    )

    top = client.get(
        "/api/v1/views/top_pages", params={"granularity": "hour", "start": iso_s(start), "end": iso_s(end)}
    )
    assert top.status_code == 200, top.text
    serving.shift_s += 10 * 86_400  # long after every view's horizon
    assert (
        client.get(
            "/api/v1/views/top_pages", params={"granularity": "hour", "start": iso_s(start), "end": iso_s(end)}
        ).json()["provenance"]["complete"]
        is False
    )


def test_the_status_route_flags_stale_views(client, own_marker):
    serving: ClockShifted = client.app.state.serving
    body = client.get("/api/v1/status").json()
    assert body["stale_views"] == [] and body["views"][VIEW]["stale"] is None
    serving.shift_s = int(stale_from_s(own_marker) - time.time()) + 1
    forget_health(client.app)  # the status is read once per short period
    body = client.get("/api/v1/status").json()
    assert VIEW in body["stale_views"]
    assert body["views"][VIEW]["stale"].startswith("stale: ")


def test_lambdactl_status_names_a_stale_view(own_marker, monkeypatch):
    from lambdactl.status import view_lines, view_states

    lines = view_lines(view_states(own_marker))
    assert any(line.startswith(VIEW) and line.endswith("complete") for line in lines), lines
    shift = int(stale_from_s(own_marker) - time.time()) + 1
    monkeypatch.setattr(ServingLayer, "now_s", lambda self: int(time.time()) + shift)
    states = view_states(own_marker)
    [state] = [s for s in states if s.name == VIEW]
    assert state.stale and state.stale.startswith("stale: ")
    [row] = [line for line in view_lines(states) if line.startswith(VIEW + " ")]
    assert "stale: " in row and "`lambdactl batch`" in row
