"""A throwaway stack of its own (a temporary state dir, the API alone on a free port, no store):
the supervisor brings a killed API back by itself, gives up on a restart loop with a clear status,
`lambdactl up` fails naming a job that keeps dying, and `down` leaves no process behind."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from definitions.settings import Settings
from infra.supervisor_config import socket_path
from stores.restarts import restart_report
from tests.integration.infra.test_stack_manager import _tagged
from tests.support.polling import wait_for

LAMBDACTL = Path(sys.executable).parent / "lambdactl"
BACK_WITHIN_S = 30


@dataclass
class Isolated:
    state_dir: Path
    port: int
    env: dict[str, str]

    def ctl(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(LAMBDACTL), *args],
            env=self.env,
            cwd=self.state_dir.parent,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def status(self) -> dict[str, dict]:
        done = self.ctl("status", "--json", timeout=60)
        return {row["name"]: row for row in json.loads(done.stdout)["services"]}

    def settings(self) -> Settings:
        """This stack's settings, as its processes have them (its own API port: the health of the
        platform's API on the default port is not this API's)."""
        return Settings(
            state_dir=self.state_dir,
            environment="development",
            api={"port": self.port},
            stack={"managed_services": ["api"], "restart_max": 2},
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def isolated(tmp_path):
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAMBDA_")}
    env.update(
        LAMBDA_ENVIRONMENT="development",
        LAMBDA_STATE_DIR=str(tmp_path / "state"),
        LAMBDA_API__PORT=str(port),
        LAMBDA_STACK__MANAGED_SERVICES='["api"]',
        LAMBDA_STACK__RESTART_MAX="2",
    )
    stack = Isolated(tmp_path / "state", port, env)
    yield stack
    stack.ctl("down", timeout=120)
    for proc in _tagged(stack.state_dir):  # never leave a process of this test behind, whatever failed
        proc.kill()


def _back(stack: Isolated, old_pid: int):
    row = stack.status()["api"]
    return row if row["healthy"] and row["pid"] not in (None, old_pid) else None


def _kill_and_wait(stack: Isolated) -> tuple[dict, float]:
    pid = stack.status()["api"]["pid"]
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    row = wait_for(lambda: _back(stack, pid), "the API to be back by itself", timeout_s=BACK_WITHIN_S, interval_s=0.5)
    return row, time.monotonic() - killed


def test_a_killed_api_comes_back_by_itself_and_a_restart_loop_is_given_up(isolated):
    up = isolated.ctl("up")
    assert up.returncode == 0, up.stderr[-3000:]
    rows = isolated.status()
    assert rows["api"]["healthy"] and rows["supervisor"]["healthy"], rows

    row, took = _kill_and_wait(isolated)
    print(f"API back {took:.1f}s after kill -9 (restart 1)")
    assert row["restarts"] == 1 and "terminated by SIGKILL" in row["restart_detail"], row
    row, took = _kill_and_wait(isolated)
    print(f"API back {took:.1f}s after kill -9 (restart 2)")
    assert row["restarts"] == 2

    # Past the budget (2 restarts within the window): the supervisor gives up and says so.
    os.kill(row["pid"], signal.SIGKILL)

    def given_up():
        row = isolated.status()["api"]
        return row if not row["running"] and "gave up" in row["detail"] else None

    gave_up = wait_for(given_up, "the supervisor to give up on the API", timeout_s=BACK_WITHIN_S, interval_s=0.5)
    assert "restart loop" in gave_up["detail"] and "terminated by SIGKILL" in gave_up["detail"]
    assert isolated.ctl("status", timeout=60).returncode == 1
    report = restart_report(isolated.settings())["api"]
    assert report["gave_up"] and report["restarts"] == 2 and report["last_reason"] == "terminated by SIGKILL"
    assert "log_tail" not in report

    # `up` tries it again, with a fresh budget.
    up = isolated.ctl("up")
    assert up.returncode == 0, up.stderr[-3000:]
    assert isolated.status()["api"]["healthy"]
    report = restart_report(isolated.settings())["api"]
    assert not report["gave_up"] and report["restarts"] == 0 and report["restarts_total"] == 2

    down = isolated.ctl("down", timeout=120)
    assert down.returncode == 0, down.stderr[-3000:]
    assert _tagged(isolated.state_dir) == [], "down leaves no process of the stack behind"
    assert not socket_path(isolated.state_dir).exists()
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", isolated.port)) != 0


def test_up_fails_naming_a_job_that_keeps_dying(isolated):
    # 192.0.2.1 (TEST-NET-1, RFC 5737) is never an address of this machine: the API cannot bind it
    # and exits at once, every time the supervisor starts it.
    isolated.env["LAMBDA_API__HOST"] = "192.0.2.1"
    up = isolated.ctl("up")
    assert up.returncode == 2, up.stderr[-3000:]
    assert "api: keeps dying: the supervisor gave up after 2 restart(s)" in up.stderr, up.stderr[-3000:]
    assert "last exit: exit status 1" in up.stderr, up.stderr[-3000:]
    assert "likely cause: the host it is set to listen on is not an address of this machine" in up.stderr
    assert "cannot assign requested address" in up.stderr.lower(), "the job's last error lines are shown"
    assert "gave up" in isolated.status()["api"]["detail"]


def test_up_after_the_supervisor_was_killed_replaces_what_it_left(isolated):
    up = isolated.ctl("up")
    assert up.returncode == 0, up.stderr[-3000:]
    rows = isolated.status()
    supervisor, api = rows["supervisor"]["pid"], rows["api"]["pid"]
    os.kill(supervisor, signal.SIGKILL)

    def supervisor_gone():
        rows = isolated.status()
        return rows if not rows["supervisor"]["running"] else None

    rows = wait_for(supervisor_gone, "the status to show the supervisor gone", timeout_s=30)
    assert rows["supervisor"]["healthy"] is False and "not running" in rows["supervisor"]["detail"]
    assert psutil.pid_exists(api), "its API runs on, unsupervised"
    assert rows["api"]["running"] and rows["api"]["pid"] == api, "status shows the API that still serves"
    assert "without the supervisor" in rows["api"]["detail"], rows["api"]

    up = isolated.ctl("up")
    assert up.returncode == 0, up.stderr[-3000:]
    # the API, the session leader it ran under, and its worker processes (with multiprocessing's tracker)
    ended = re.search(r"ended (\d+) process\(es\) it had left behind", up.stderr)
    assert ended and int(ended.group(1)) >= 2, up.stderr[-3000:]
    rows = isolated.status()
    assert rows["api"]["healthy"] and rows["api"]["pid"] != api and rows["supervisor"]["healthy"]
    assert not psutil.pid_exists(api) or psutil.Process(api).status() == psutil.STATUS_ZOMBIE


def test_down_after_the_supervisor_was_killed_stops_what_it_left_as_a_stop_not_a_kill(isolated):
    """Its programs were killed with SIGKILL (after the stores they use): a stop never ran."""
    up = isolated.ctl("up")
    assert up.returncode == 0, up.stderr[-3000:]
    rows = isolated.status()
    os.kill(rows["supervisor"]["pid"], signal.SIGKILL)
    api = psutil.Process(rows["api"]["pid"])
    wait_for(lambda: not isolated.status()["supervisor"]["running"], "the supervisor gone", timeout_s=30)
    down = isolated.ctl("down")
    assert down.returncode == 0, down.stderr[-3000:]
    assert re.search(r"stopped \d+ process\(es\) a supervisor that is gone had left running", down.stderr), down.stderr
    assert not api.is_running() or api.status() == psutil.STATUS_ZOMBIE
    # Its output went to the dead supervisor (no log of its stop): what `down` had to kill, it names.
    assert "killing orphan" not in down.stderr, "each stopped on SIGTERM, within stack.stop_timeout_s"
    assert not _tagged(isolated.state_dir), "nothing of the state dir runs"


def test_up_with_a_setting_that_changes_a_program_restarts_it_and_waits_for_it(isolated):
    """A setting that changes how the supervisor runs a program (here the size its log rotates at)
    makes the next `up` replace that program: it runs again, healthy, in the new form. (The
    supervisor's update stops a changed program; `up` used to then wait for it in vain.)"""
    up = isolated.ctl("up")
    assert up.returncode == 0, up.stderr[-3000:]
    before = isolated.status()["api"]["pid"]
    isolated.env["LAMBDA_STACK__LOG_MAX_BYTES"] = str(3 * 2**20)
    up = isolated.ctl("up")
    assert up.returncode == 0, up.stderr[-3000:]
    assert "supervisor: updated" in up.stderr, up.stderr[-3000:]
    row = isolated.status()["api"]
    assert row["healthy"] and row["pid"] not in (None, before), row
    conf = (isolated.state_dir / "supervisor" / "supervisord.conf").read_text()
    assert f"stdout_logfile_maxbytes={3 * 2**20}" in conf


def test_status_shows_a_restart_listener_that_stopped_and_up_brings_it_back(isolated):
    """supervisord gives its restart listener up after its own retries; nothing then restarts a
    platform process that exits, and the status said the supervisor restarts them."""
    from infra.process import ProcessSupervisor
    from infra.supervision import LISTENER, Supervisord

    up = isolated.ctl("up")
    assert up.returncode == 0, up.stderr[-3000:]
    assert isolated.status()["supervisor"]["healthy"]
    settings = isolated.settings()
    Supervisord(settings, ProcessSupervisor(settings.state_dir)).rpc().stopProcess(LISTENER, True)
    row = isolated.status()["supervisor"]
    assert row["healthy"] is False and "restart listener is STOPPED" in row["detail"], row
    up = isolated.ctl("up")
    assert up.returncode == 0, up.stderr[-3000:]
    assert isolated.status()["supervisor"]["healthy"]


def _rpc(stack: Isolated):
    from infra.process import ProcessSupervisor
    from infra.supervision import Supervisord

    settings = stack.settings()
    return Supervisord(settings, ProcessSupervisor(settings.state_dir)).rpc()


def test_an_up_stopped_half_way_through_an_update_is_repaired_by_the_next_up(isolated):
    """An `up` interrupted (Ctrl-C, a kill) after it wrote the new configuration and removed a changed
    program, before adding it back, left supervisord without that program: every later `up` found the
    file unchanged and failed ("BAD_NAME") until `down`."""
    up = isolated.ctl("up")
    assert up.returncode == 0, up.stderr[-3000:]
    rpc = _rpc(isolated)
    rpc.stopProcessGroup("api")
    rpc.removeProcessGroup("api")
    up = isolated.ctl("up")
    assert up.returncode == 0, up.stderr[-3000:]
    assert isolated.status()["api"]["healthy"]


def test_status_says_a_restart_listener_supervisord_no_longer_runs_restarts_nothing(isolated):
    """A listener supervisord does not know (its group removed half-way through an update) or one
    it is starting again after it exited was reported as restarting the platform's processes."""
    from infra.supervision import LISTENER

    up = isolated.ctl("up")
    assert up.returncode == 0, up.stderr[-3000:]
    rpc = _rpc(isolated)
    rpc.stopProcessGroup(LISTENER)
    rpc.removeProcessGroup(LISTENER)
    row = isolated.status()["supervisor"]
    assert row["healthy"] is False and "restart listener is UNKNOWN" in row["detail"], row
    up = isolated.ctl("up")
    assert up.returncode == 0, up.stderr[-3000:]
    assert isolated.status()["supervisor"]["healthy"]


def test_a_stopped_program_stays_stopped_also_with_a_restart_pending_until_up(isolated):
    """`lambdactl reset-speed` stops the speed layer and removes its checkpoint: a restart the
    listener had pending for it (it had just exited) started it again on a checkpoint being removed.
    Stack.stop takes the program out of supervisord until the next `up`."""
    from infra.stack import Stack

    isolated.env["LAMBDA_STACK__RESTART_BACKOFF_S"] = "6"  # the listener restarts an exited API after 6 s
    up = isolated.ctl("up")
    assert up.returncode == 0, up.stderr[-3000:]
    pid = isolated.status()["api"]["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not isolated.status()["api"]["running"], "the API to be seen gone", 5, interval_s=0.1)
    stack = Stack(isolated.settings())
    assert stack.stop("api") is False, "it was not running"
    assert stack.stop("api") is False, "twice: nothing more to do"
    deadline = time.monotonic() + 10  # past the restart that was pending
    while time.monotonic() < deadline:
        assert not isolated.status()["api"]["running"], "restarted while taken out"
        time.sleep(0.5)
    up = isolated.ctl("up")
    assert up.returncode == 0, up.stderr[-3000:]
    assert isolated.status()["api"]["healthy"], "the next up starts it"


def test_a_restart_of_a_program_taken_out_says_to_run_up_and_one_in_place_comes_back(isolated):
    """`views apply` restarts the speed layer: after `reset-speed` took it out of supervisord, the
    restart was a bare xmlrpc Fault (BAD_NAME)."""
    from infra.errors import StackError
    from infra.stack import Stack

    up = isolated.ctl("up")
    assert up.returncode == 0, up.stderr[-3000:]
    stack = Stack(isolated.settings())
    pid = isolated.status()["api"]["pid"]
    assert stack.restart("api") >= 0
    assert isolated.status()["api"]["pid"] not in (None, pid), "restarted"
    stack.stop("api")
    with pytest.raises(StackError, match=r"not under the supervisor now.*lambdactl up"):
        stack.restart("api")
    assert not isolated.status()["api"]["running"], "left as it was"


def test_up_with_changed_settings_restarts_the_programs_that_loaded_the_old_ones(isolated):
    """`up` persisted a new setting and left the running processes as they were: a new API token
    was refused by the API that still ran, and the old one still let everyone in, while `up`
    said every process was already running."""
    import httpx

    from definitions.service_settings import DEFAULT_TOKEN

    def answer(token: str) -> int:  # 401 before the body is read; a body of no event is refused after
        url = f"http://127.0.0.1:{isolated.port}/api/v1/events"
        return httpx.post(url, content=b"{}", headers={"Authorization": f"Bearer {token}"}, timeout=30).status_code

    up = isolated.ctl("up")
    assert up.returncode == 0, up.stderr[-3000:]
    first = isolated.status()["api"]["pid"]
    again = isolated.ctl("up")
    assert again.returncode == 0 and isolated.status()["api"]["pid"] == first, "no change: left running"

    isolated.env["LAMBDA_API__TOKEN"] = "a-new-token-for-this-test"
    changed = isolated.ctl("up")
    assert changed.returncode == 0, changed.stderr[-3000:]
    assert "settings changed since it started: api; restarting it" in changed.stderr, changed.stderr[-3000:]
    row = isolated.status()["api"]
    assert row["healthy"] and row["pid"] != first, "restarted with the new settings"
    assert answer("a-new-token-for-this-test") != 401
    assert answer(DEFAULT_TOKEN) == 401, "the old token no longer lets anyone in"
