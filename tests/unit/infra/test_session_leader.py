"""The session leader that runs each supervised program in a session of its own (infra/session_leader.py):
real processes, no service."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from infra import session_leader
from infra.restart_listener import program_of, session_members
from infra.supervisor_config import program_process, session_command
from tests.support.polling import wait_for

LEADER = Path(session_leader.__file__)


def _start(name: str, program: str, tmp_path: Path, *options: str) -> subprocess.Popen:
    """The leader running `python -c program`, in a process group of its own like supervisord's children."""
    return subprocess.Popen(
        [sys.executable, "-S", str(LEADER), name, *options, "--", sys.executable, "-c", program, str(tmp_path)],
        process_group=0,
    )


def _report(tmp_path: Path) -> dict:
    path = tmp_path / "report.json"
    return wait_for(lambda: path.exists() and path.stat().st_size and json.loads(path.read_text()), "report", 10, 0.05)


REPORT = (
    "import json, os, sys, pathlib; "
    "(pathlib.Path(sys.argv[1]) / 'report.json.tmp').write_text(json.dumps(dict("
    "pid=os.getpid(), sid=os.getsid(0), pgid=os.getpgrp(), ppid=os.getppid()))); "
    "os.replace(pathlib.Path(sys.argv[1]) / 'report.json.tmp', pathlib.Path(sys.argv[1]) / 'report.json'); "
)


def test_program_leads_a_session_of_its_own_and_its_exit_status_passes_through(tmp_path):
    leader = _start("api", REPORT + "sys.exit(7)", tmp_path)
    assert leader.wait(10) == 7
    seen = _report(tmp_path)
    assert seen["sid"] == seen["pid"] == seen["pgid"]
    assert seen["sid"] != os.getsid(0)
    assert seen["ppid"] == leader.pid


def test_a_program_killed_by_a_signal_kills_the_leader_with_the_same_signal(tmp_path):
    leader = _start("speed-layer", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", tmp_path)
    assert leader.wait(10) == -signal.SIGKILL


SLEEPER_FAMILY = (
    REPORT + "import subprocess, time; "
    "kid = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    "(pathlib.Path(sys.argv[1]) / 'kid').write_text(str(kid.pid)); "
)


def _kid(tmp_path: Path) -> psutil.Process:
    path = tmp_path / "kid"
    return psutil.Process(int(wait_for(lambda: path.exists() and path.read_text(), "grandchild pid", 10, 0.05)))


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_stop_signal_reaches_the_programs_whole_group_and_the_leader_dies_of_it(tmp_path):
    leader = _start("archiver", SLEEPER_FAMILY + "time.sleep(60)", tmp_path)
    kid = _kid(tmp_path)
    program = psutil.Process(_report(tmp_path)["pid"])
    os.killpg(leader.pid, signal.SIGTERM)  # what supervisord does with stopasgroup
    assert leader.wait(10) == -signal.SIGTERM
    wait_for(lambda: _gone(kid) and _gone(program), "the program and its child to end", 10, 0.05)


STOPPING_DRIVER = SLEEPER_FAMILY + (
    "\nimport signal\n"
    "def stop(*_):\n"
    "    time.sleep(0.5)\n"  # a driver stopping its queries through the JVM, a child of its group
    "    (pathlib.Path(sys.argv[1]) / 'child-at-stop').write_text('alive' if kid.poll() is None else 'dead')\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "time.sleep(60)"
)


@pytest.mark.parametrize(("stops", "child_at_stop"), [("program", "alive"), ("group", "dead")])
def test_stops_program_sends_stop_signals_to_the_program_alone_and_its_leftovers_still_end(
    tmp_path, stops, child_at_stop
):
    leader = _start("speed-layer", STOPPING_DRIVER, tmp_path, "--stop-after", "5", "--stops", stops)
    kid = _kid(tmp_path)
    os.killpg(leader.pid, signal.SIGTERM)  # what supervisord does with stopasgroup
    assert leader.wait(10) == 0  # the program's own exit, after it stopped
    assert (tmp_path / "child-at-stop").read_text() == child_at_stop
    wait_for(lambda: _gone(kid), "the program's leftover child to be ended", 10, 0.05)


def test_what_the_program_leaves_of_its_group_is_killed_when_it_exits(tmp_path):
    leader = _start("archiver", SLEEPER_FAMILY + "sys.exit(3)", tmp_path)
    kid = _kid(tmp_path)
    assert leader.wait(10) == 3
    wait_for(lambda: _gone(kid), "the program's leftover child to be killed", 10, 0.05)


def test_killing_the_leader_kills_the_program(tmp_path):
    leader = _start("api", REPORT + "import time; time.sleep(60)", tmp_path)
    program = psutil.Process(_report(tmp_path)["pid"])
    leader.kill()
    assert leader.wait(10) == -signal.SIGKILL
    wait_for(lambda: _gone(program), "the program to die with its leader", 10, 0.05)


def test_a_program_that_cannot_start_exits_127_naming_it(tmp_path, capfd):
    leader = subprocess.Popen([sys.executable, "-S", str(LEADER), "api", "--", str(tmp_path / "no-such-program")])
    assert leader.wait(10) == 127
    assert "cannot start" in capfd.readouterr().err


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["api"],
        ["api", "python"],
        ["", "--", "python"],
        ["api", "--"],
        ["api", "--stop-after", "soon", "--", "python"],
        ["api", "--stop-after", "0", "--", "python"],
        ["api", "--stop-after", "--", "python"],
        ["api", "--cpu-nice", "-5", "--", "python"],
        ["api", "--cpu-nice", "20", "--", "python"],
        ["api", "--cpu-nice", "low", "--", "python"],
        ["api", "--nice", "5", "--", "python"],
        ["api", "--stops", "session", "--", "python"],
        ["api", "--stops", "--", "python"],
    ],
)
def test_a_wrong_command_line_exits_2(args):
    assert subprocess.run([sys.executable, "-S", str(LEADER), *args], capture_output=True).returncode == 2


def _autogroup_nice(pid: int) -> int | None:
    """The nice value of `pid`'s autogroup; None where the kernel has none, or where the process is in
    a cgroup of its own (the file then reads empty: the cgroup, not the session, shares the CPU)."""
    try:
        words = Path(f"/proc/{pid}/autogroup").read_text().split()
    except OSError:
        return None
    return int(words[-1]) if words else None


def test_cpu_nice_makes_the_programs_session_and_the_program_yield_the_cpu(tmp_path):
    mine = _autogroup_nice(os.getpid())
    leader = _start(
        "archiver", REPORT + "import time; time.sleep(30)", tmp_path, "--stop-after", "5", "--cpu-nice", "7"
    )
    try:
        program = _report(tmp_path)["pid"]
        assert os.getpriority(os.PRIO_PROCESS, program) == 7
        assert os.getpriority(os.PRIO_PROCESS, leader.pid) == os.getpriority(os.PRIO_PROCESS, 0)
        if mine is not None:  # a kernel with autogroups: the program's session has one of its own
            assert _autogroup_nice(program) == 7
            assert _autogroup_nice(os.getpid()) == _autogroup_nice(leader.pid) == mine
    finally:
        leader.kill()
        leader.wait(10)
    assert session_command("archiver", ["x"], 10, 7)[4:9] == ["--stop-after", "9", "--cpu-nice", "7", "--"]


def test_the_restart_listener_finds_what_a_killed_leaders_session_left(tmp_path):
    leader = _start("speed-layer", SLEEPER_FAMILY + "time.sleep(60)", tmp_path)
    kid = _kid(tmp_path)
    program = wait_for(lambda: program_of(leader.pid), "the program", 10, 0.05)
    assert program[0] == _report(tmp_path)["pid"]
    try:
        leader.kill()  # the program dies with it; its child (another process of the group) is left
        assert leader.wait(10) == -signal.SIGKILL
        wait_for(
            lambda: _gone(psutil.Process(program[0])) if psutil.pid_exists(program[0]) else True, "program", 10, 0.05
        )
        assert [p.pid for p in session_members(*program)] == [kid.pid]
        assert session_members(program[0], program[1] + 5) == [] or not psutil.pid_exists(program[0])
        assert session_members(os.getsid(0) + 10**6) == []  # no such session
    finally:
        kid.kill()


def test_a_stop_signal_right_after_the_start_is_not_lost(tmp_path):
    for i in range(20):
        leader = subprocess.Popen(
            [sys.executable, "-S", str(LEADER), "api", "--", sys.executable, "-c", "import time; time.sleep(30)"],
            process_group=0,
        )
        time.sleep(0.005 * (i % 5))
        os.killpg(leader.pid, signal.SIGTERM)
        assert leader.wait(10) == -signal.SIGTERM, f"start {i}"


@pytest.mark.parametrize("stops", ["group", "program"])
def test_a_program_that_ignores_stop_signals_is_killed_with_its_group_after_stop_after(tmp_path, stops):
    ignoring = SLEEPER_FAMILY.replace(
        "import subprocess, time; ", "import signal, subprocess, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    )
    leader = _start("speed-layer", ignoring + "time.sleep(60)", tmp_path, "--stop-after", "1", "--stops", stops)
    kid = _kid(tmp_path)
    started = time.monotonic()
    os.killpg(leader.pid, signal.SIGTERM)
    assert leader.wait(10) == -signal.SIGKILL
    assert 0.9 <= time.monotonic() - started < 5
    wait_for(lambda: _gone(kid), "the program's child to be killed too", 10, 0.05)


def test_supervisord_runs_each_program_under_its_session_leader_and_status_sees_the_program(tmp_path):
    leader = _start("api", REPORT + "import time; time.sleep(60)", tmp_path)
    try:
        program = _report(tmp_path)["pid"]
        assert wait_for(lambda: program_process(psutil.Process(leader.pid)).pid == program, "the program", 10, 0.05)
        me = psutil.Process()
        assert program_process(me) is me
    finally:
        leader.kill()
        leader.wait(10)
    command = session_command("api", [sys.executable, "-m", "api.server"], 10)
    assert command[1:7] == ["-S", str(LEADER), "api", "--stop-after", "9", "--"]
    assert command[-2:] == ["-m", "api.server"]
