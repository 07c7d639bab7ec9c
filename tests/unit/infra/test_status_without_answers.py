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
    monkeypatch.setattr("infra.stack_status.restart_report", lambda _settings: pending)
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
