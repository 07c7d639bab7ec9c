"""One `lambdactl views apply` at a time on a state directory. Two at once each saved their own
views and restarted the speed layer, and the one that lost retired the other's new views. A second
one waits for the first, saying so, then reads the settings the first saved."""

from __future__ import annotations

import argparse
import logging
import os
import threading

from definitions.files import state_lock
from definitions.settings import Settings
from definitions.settings_store import persist_view_modules, with_view_modules
from lambdactl import views as views_cli
from tests.support.polling import wait_for


def test_a_second_apply_waits_and_then_applies_what_the_first_saved(tmp_path, monkeypatch, caplog):
    state = tmp_path / "state"
    monkeypatch.setenv("LAMBDA_STATE_DIR", str(state))
    monkeypatch.delenv("LAMBDA_VIEWS__MODULES", raising=False)
    read_before = with_view_modules(Settings(state_dir=state), ["views_read_before_the_wait"])
    said: list[str] = []
    monkeypatch.setattr(views_cli, "_say", said.append)
    outcome: list[int] = []
    args = argparse.Namespace(modules=None, paths=None, timeout=5)
    with caplog.at_level(logging.ERROR), state_lock(state, "views.lock", "lambdactl views apply"):
        second = threading.Thread(target=lambda: outcome.append(views_cli.cmd_views_apply(read_before, args)))
        second.start()
        wait_for(lambda: any("waiting for" in m for m in said), "the second apply to wait", 10, 0.01)
        assert any(f"another lambdactl views apply or reset-speed on {state} (pid {os.getpid()})" in m for m in said), (
            said
        )
        assert not outcome, "it waits before it reads or changes anything"
        # The first apply saves its views (modules that do not load, so the second stops there).
        persist_view_modules(with_view_modules(Settings(state_dir=state), ["views_the_first_saved"]))
    second.join(timeout=30)
    assert outcome == [2]
    text = caplog.text
    assert "views_the_first_saved" in text and "views_read_before_the_wait" not in text, text


def test_reset_speed_takes_the_views_lock_before_the_stack_lock_as_views_apply_does(tmp_path, monkeypatch):
    """`views apply` holds views.lock and its speed-layer restart takes stack.lock; reset-speed took
    them the other way round: the two at once waited for each other for ever."""
    from definitions.files import LockHeld
    from lambdactl import reset_speed

    state = tmp_path / "state"
    said: list[str] = []
    monkeypatch.setattr(reset_speed, "_say", said.append)
    monkeypatch.setattr(reset_speed, "_reset", lambda settings, args: 0)
    outcome: list[int] = []
    with state_lock(state, "views.lock", "lambdactl views apply"):  # an apply in progress
        reset = threading.Thread(
            target=lambda: outcome.append(reset_speed.cmd_reset_speed(Settings(state_dir=state), argparse.Namespace()))
        )
        reset.start()
        wait_for(lambda: any("waiting for" in m for m in said), "reset-speed to wait", 10, 0.01)
        try:
            with state_lock(state, "stack.lock", "the apply's restart", wait=False):
                pass  # the apply's restart can take the stack lock: reset-speed holds nothing yet
        except LockHeld:
            raise AssertionError("reset-speed holds the stack lock while it waits for the views lock") from None
    reset.join(timeout=30)
    assert outcome == [0]
