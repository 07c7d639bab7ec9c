"""`lambdactl status` says what it knows of a supervised program (no service: supervisord's answers
are given). A supervisord that runs but does not answer (busy, stuck) made every program row say
"stopped"; one that no longer runs left a stale "restarting in 0s" from its last restart record in
place of the hint that nothing restarts anything until `lambdactl up`."""

from __future__ import annotations

import pytest

from definitions.settings import Settings
from infra.stack import Stack
from lambdactl.status import format_status


@pytest.fixture
def stack(tmp_path, monkeypatch):
    stack = Stack(Settings(state_dir=tmp_path / "state"), names=["api"])
    pending = {
        "api": {
            "restarts_total": 1,
            "gave_up": False,
            "last_reason": "exit status 1",
            "summary": "restarting in 0s after: exit status 1",
        }
    }
    monkeypatch.setattr("infra.stack_status.restart_report", lambda _settings, **_kw: pending)
    monkeypatch.setattr(stack.supervisor, "process", lambda name: None)
    monkeypatch.setattr(stack.supervisor, "left_running", lambda name: None)
    monkeypatch.setattr(stack.supervisor, "supervised", lambda name: True)
    return stack


def test_a_supervisor_that_runs_but_does_not_answer_leaves_the_state_unknown(stack, monkeypatch):
    monkeypatch.setattr(stack.supervisord, "running", lambda: True)
    monkeypatch.setattr(stack.supervisord, "answering", lambda: False)
    rows = stack.status(probe=False)
    row = next(r for r in rows if r.name == "api")
    assert "unknown" in row.detail and "does not answer" in row.detail, row.detail
    assert "restarting in" not in format_status(rows)


def test_a_supervisor_that_is_gone_says_so_not_a_restart_it_will_never_make(stack, monkeypatch):
    monkeypatch.setattr(stack.supervisord, "running", lambda: False)
    monkeypatch.setattr(stack.supervisord, "answering", lambda: False)
    rows = stack.status(probe=False)
    row = next(r for r in rows if r.name == "api")
    assert "nor is the supervisor" in row.detail and "exit status 1" in row.detail, "its last exit is still said"
    shown = format_status(rows)
    assert "restarting in" not in shown and "nor is the supervisor" in shown, shown


@pytest.mark.parametrize("answers", [False, True])
def test_status_asks_supervisord_at_most_once_whatever_the_number_of_services(tmp_path, monkeypatch, answers):
    """Asked twice per service (the process, then its memory), each up to 10 s while a stuck
    supervisord kept its socket open: minutes before `lambdactl status` said anything."""
    from types import SimpleNamespace

    names = ["api", "archiver", "speed-layer"]
    stack = Stack(Settings(state_dir=tmp_path / "state"), names=names)
    monkeypatch.setattr("infra.stack_status.restart_report", lambda _settings, **_kw: {})
    monkeypatch.setattr(stack.supervisor, "supervised", lambda name: name in names)
    monkeypatch.setattr(stack.supervisord, "running", lambda: True)
    monkeypatch.setattr(stack.supervisord, "answering", lambda: answers)
    asked: list = []

    def all_process_info():
        asked.append("getAllProcessInfo")
        return [{"name": "api", "pid": 0}]

    rpc = SimpleNamespace(getAllProcessInfo=all_process_info, getProcessInfo=lambda name: {"statename": "RUNNING"})
    monkeypatch.setattr(stack.supervisord, "rpc", lambda timeout_s=10.0: rpc)
    rows = stack.status(probe=False)
    assert asked == (["getAllProcessInfo"] if answers else []), asked
    assert {r.name for r in rows} >= {"api", "archiver", "speed-layer"}
    assert stack.supervisord.all_info() == {"api": {"name": "api", "pid": 0}}, "outside status it asks again"
