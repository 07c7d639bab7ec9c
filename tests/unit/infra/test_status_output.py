"""`lambdactl status`: the JSON form carries the views as the text form does, and both exit 1 for a
stale view, or a service that is not healthy."""

from __future__ import annotations

import argparse
import json

import pytest

from infra.stack import ServiceStatus
from lambdactl import status
from serving_layer.view_states import ViewState


def _run(monkeypatch, capsys, views, *, thrift_healthy=True, as_json=True):
    rows = [
        ServiceStatus("hbase-thrift", True, 10, 50.0, thrift_healthy, "answers"),
        ServiceStatus("api", True, 11, 80.0, True, "answers"),
    ]

    class FakeStack:
        def __init__(self, settings):
            pass

        def status(self, probe):
            return rows

    monkeypatch.setattr("infra.stack.Stack", FakeStack)
    asked = []
    monkeypatch.setattr(status, "view_states", lambda settings: asked.append(1) or views)
    code = status.cmd_status(object(), argparse.Namespace(json=as_json))
    out = capsys.readouterr().out
    return code, (json.loads(out) if as_json else out), asked


def test_json_names_each_view_and_a_stale_one_fails(monkeypatch, capsys):
    fresh = ViewState("page_views", 3, 1_800_000_000_000, None)
    stale = ViewState("top_pages", 3, 1_800_000_000_000, "stale: its realtime rows expired")
    code, body, _ = _run(monkeypatch, capsys, [fresh])
    assert code == 0
    assert [r["name"] for r in body["services"]] == ["hbase-thrift", "api"]
    assert body["views"][0]["name"] == "page_views" and body["views"][0]["version"] == 3
    assert body["views_error"] is None
    code, body, _ = _run(monkeypatch, capsys, [fresh, stale])
    assert code == 1
    assert body["views"][1]["stale"] == "stale: its realtime rows expired"


@pytest.mark.parametrize("as_json", [True, False])
def test_a_stale_view_fails_both_forms(monkeypatch, capsys, as_json):
    stale = ViewState("top_pages", 3, 1_800_000_000_000, "stale: its realtime rows expired")
    code, out, _ = _run(monkeypatch, capsys, [stale], as_json=as_json)
    assert code == 1
    if not as_json:
        assert "top_pages" in out and "stale: its realtime rows expired" in out


def test_views_unreadable_are_said_not_hidden(monkeypatch, capsys):
    code, body, _ = _run(monkeypatch, capsys, "the batch views' pointer cannot be read (hbase)")
    assert code == 0 and body["views"] is None
    assert body["views_error"] == "the batch views' pointer cannot be read (hbase)"


def test_views_are_not_read_without_thrift(monkeypatch, capsys):
    code, body, asked = _run(monkeypatch, capsys, [], thrift_healthy=False)
    assert code == 1 and asked == [] and body["views"] is None
    assert "hbase-thrift is not healthy" in body["views_error"]
