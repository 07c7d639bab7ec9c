"""Whether a batch run's process still runs is asked by its start in clock ticks since boot, not
its wall-clock start (no service: this test's own process and a finished child). A clock stepped by
more than 2 s (an NTP correction, a resumed VM) made a run writing for hours count as dead: the
next retention, even within the grace period, dropped its tables mid-write."""

from __future__ import annotations

import socket
import subprocess
import sys

import psutil

from definitions.files import boot_id, start_ticks
from stores.batch_views import _may_run


def _this_run() -> dict:
    """A run "writing" in this test's own process, recorded as batch_layer.job records it."""
    me = psutil.Process()
    return {
        "state": "writing",
        "host": socket.gethostname(),
        "pid": me.pid,
        "pid_started_ms": int(me.create_time() * 1000),
        "pid_start_ticks": start_ticks(me.pid),
        "boot_id": boot_id(),
    }


def test_a_writing_run_is_still_running_after_the_clock_steps(monkeypatch):
    run = _this_run()
    assert _may_run(run) is True
    stepped = psutil.Process.create_time
    monkeypatch.setattr(psutil.Process, "create_time", lambda self: stepped(self) + 5.0)
    assert _may_run(run) is True, "the clock moved, not the process"
    assert _may_run({**run, "pid_start_ticks": run["pid_start_ticks"] - 100}) is False, "another process, that pid"
    assert _may_run({**run, "boot_id": "another boot"}) is False, "the machine restarted since"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert _may_run({**run, "pid": gone.pid}) is False
    earlier = {k: v for k, v in run.items() if k not in ("pid_start_ticks", "boot_id")}
    assert _may_run(earlier) is False, "a record of an earlier release: its wall-clock start, as before"
    monkeypatch.undo()
    assert _may_run(earlier) is True
    assert _may_run({**run, "host": "another-host"}) is None


def test_a_machine_without_a_boot_id_asks_by_the_wall_clock_start_not_calls_the_run_dead(monkeypatch):
    """A record with a boot id read where none can be read: the ids differed, so a run writing was
    taken for dead (its tables dropped by retention)."""
    import definitions.files

    run = _this_run()
    monkeypatch.setattr(definitions.files, "boot_id", lambda: None)
    assert _may_run(run) is True
