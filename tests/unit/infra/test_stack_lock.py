"""One `up` or `down` at a time on a state directory: a second one waits for the first, saying so.
Two at once each launched the stores (both saw none running, both passed the port checks), the
second pid file hid the first process, and the next `up` found the ports taken."""

from __future__ import annotations

import os
import threading
import time

from infra.stack import Stack
from infra.state_lock import stack_lock


def test_a_second_up_waits_for_the_one_running(settings, tmp_path):
    ours = settings.model_copy(update={"state_dir": tmp_path / "state", "environment": "development"})
    said: list[str] = []
    outcome: list[dict] = []
    with stack_lock(ours.state_dir):
        second = threading.Thread(target=lambda: outcome.append(Stack(ours, names=[]).up(on_progress=said.append)))
        second.start()
        deadline = time.monotonic() + 10
        while not any("waiting for" in m for m in said) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert any(f"another lambdactl up or down on {ours.state_dir} (pid {os.getpid()})" in m for m in said), said
        assert not (ours.state_dir / "settings.json").exists(), "it waits before it changes anything"
    second.join(timeout=30)
    assert outcome == [{}]
    assert (ours.state_dir / "settings.json").exists()
