"""A process is known by when it started in ticks since boot, not by its wall-clock start time (a
real child process; no service). psutil's create_time is the boot time, read from the wall clock,
plus those ticks: a clock stepped by more than a second (an NTP correction, a resumed VM) made every
running store count as stopped, so `up` met its port taken and `down` killed it with SIGKILL."""

from __future__ import annotations

import json
import sys

import psutil
import pytest

from infra.process import ProcessSupervisor


def test_a_running_process_is_still_known_after_the_clock_steps(tmp_path, monkeypatch):
    table = ProcessSupervisor(tmp_path)
    record = table.start("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "work")
    try:
        assert table.process("sleeper") is not None
        stepped = psutil.Process.create_time
        monkeypatch.setattr(psutil.Process, "create_time", lambda self: stepped(self) + 5.0)
        assert table.process("sleeper") is not None, "the clock moved, not the process"
        # Another process under the recorded pid (reused): its start ticks differ.
        data = json.loads(table.pid_file("sleeper").read_text())
        table.pid_file("sleeper").write_text(json.dumps({**data, "start_ticks": data["start_ticks"] - 100}))
        assert table.process("sleeper") is None
        # A pid file of an earlier release (no ticks): its wall-clock start time decides, as before.
        del data["start_ticks"]
        table.pid_file("sleeper").write_text(json.dumps(data))
        monkeypatch.undo()
        assert table.process("sleeper") is not None
    finally:
        psutil.Process(record.pid).kill()
        psutil.Process(record.pid).wait(10)


def test_a_pid_that_cannot_be_recorded_stops_the_process_it_started(tmp_path, monkeypatch):
    """A full disk as the pid file was written: the store ran on with no pid file, `status` said it
    was stopped and the next `up` met its port taken."""
    import uuid

    import pytest

    from infra import process
    from infra.errors import StackError

    def full(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(process, "write_private", full)
    token = uuid.uuid4().hex
    table = ProcessSupervisor(tmp_path)
    with pytest.raises(StackError, match="sleeper: could not record its pid.*No space left"):
        table.start("sleeper", [sys.executable, "-c", "import time; time.sleep(60)", token], tmp_path / "work")
    running = [p for p in psutil.process_iter(["cmdline"]) if token in (p.info["cmdline"] or [])]
    assert running == [], "the process started is stopped"
    assert not table.pid_file("sleeper").exists()


def test_orphans_a_dead_supervisor_left_are_asked_to_stop_before_they_are_killed(tmp_path):
    """A killed supervisord leaves its session leaders and their programs running. They were killed
    with SIGKILL (a streaming job's stop, Airflow's, never ran), and only after the stores they use."""
    import os
    import subprocess

    from infra.process import STATE_TAG

    said = tmp_path / "stopped"
    program = (
        "import pathlib, signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path({str(said)!r}).write_text('term'), sys.exit(0)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    env = {**os.environ, STATE_TAG: str(tmp_path)}
    orphan = subprocess.Popen(
        [sys.executable, "-c", program], env=env, start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    try:
        assert orphan.stdout is not None and orphan.stdout.readline().strip() == "ready"
        assert ProcessSupervisor(tmp_path).end_orphans(timeout_s=10) == 1
        assert orphan.wait(10) == 0 and said.read_text() == "term"
    finally:
        orphan.kill()
        orphan.wait(10)


def test_an_orphan_whose_session_leader_is_gone_is_asked_to_stop_too(tmp_path):
    """A program that died and left a child: no live process leads the child's session, and it got
    no SIGTERM, only SIGKILL after the whole wait."""
    import os
    import subprocess
    import time

    from infra.process import STATE_TAG

    said = tmp_path / "stopped"
    child = (
        "import pathlib, signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path({str(said)!r}).write_text('term'), sys.exit(0)))\n"
        f"pathlib.Path({str(tmp_path / 'ready')!r}).write_text('')\n"
        "time.sleep(60)\n"
    )
    parent = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {child!r}])"
    env = {**os.environ, STATE_TAG: str(tmp_path)}
    subprocess.run([sys.executable, "-c", parent], env=env, start_new_session=True, check=True)
    deadline = time.monotonic() + 10
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    table = ProcessSupervisor(tmp_path)
    left = table.orphans()
    try:
        assert len(left) == 1 and os.getsid(left[0].pid) != left[0].pid
        began = time.monotonic()
        assert table.end_orphans(timeout_s=20) == 1
        assert said.read_text() == "term" and time.monotonic() - began < 10
    finally:
        for proc in left:
            if proc.is_running():
                proc.kill()


def test_an_orphaned_program_is_stopped_through_its_wrapper_and_a_group_of_its_own_directly(tmp_path):
    """The wrapper (infra/session_leader.py) stops its program's group as supervisord's stop would;
    a process the program put in a group of its own (a task runner's setpgid) is not in that group
    and waited for its SIGKILL."""
    import os
    import subprocess
    import time
    from pathlib import Path

    import infra
    from infra.process import STATE_TAG

    def trap(name: str) -> str:
        return (
            "import pathlib, signal, sys, time\n"
            f"signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path({str(tmp_path / name)!r}).write_text('term'), "
            "sys.exit(0)))\n"
        )

    loner = (
        trap("loner")
        + f"os_ = __import__('os'); os_.setpgid(0, 0)\npathlib.Path({str(tmp_path / 'ready')!r}).write_text('')\ntime.sleep(60)\n"
    )
    program = (
        trap("program") + f"import subprocess\nsubprocess.Popen([sys.executable, '-c', {loner!r}])\ntime.sleep(60)\n"
    )
    wrapper = Path(infra.__file__).with_name("session_leader.py")
    env = {**os.environ, STATE_TAG: str(tmp_path)}
    command = [sys.executable, "-S", str(wrapper), "t", "--stop-after", "15", "--", sys.executable, "-c", program]
    leader = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        began = time.monotonic()
        assert ProcessSupervisor(tmp_path).end_orphans(timeout_s=20) == 3
        assert (tmp_path / "program").read_text() == "term" and (tmp_path / "loner").read_text() == "term"
        assert time.monotonic() - began < 10, "no wait for the SIGKILL"
    finally:
        leader.kill()
        leader.wait(10)
        for proc in ProcessSupervisor(tmp_path).orphans():
            proc.kill()


def test_orphaned_stores_are_stopped_once_the_platforms_orphans_are(tmp_path):
    """A supervisor that died left an archiver and Kafka running (each under its wrapper): the
    archiver is stopped, and has exited, before Kafka gets its stop; `only` leaves others alone."""
    import os
    import subprocess
    import time
    from pathlib import Path

    import infra
    from infra.process import STATE_TAG

    log = tmp_path / "stops"

    def program(name: str, linger_s: float) -> str:
        return (
            "import signal, sys, time\n"
            f"def stop(*_):\n    time.sleep({linger_s})\n"
            f"    open({str(log)!r}, 'a').write({name!r} + '\\n')\n    sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, stop)\n"
            f"open({str(tmp_path / name)!r}, 'w').close()\ntime.sleep(60)\n"
        )

    wrapper = Path(infra.__file__).with_name("session_leader.py")
    env = {**os.environ, STATE_TAG: str(tmp_path)}
    leaders = []
    for name, linger in (("kafka", 0), ("archiver", 1.5), ("api", 0)):
        command = [sys.executable, "-S", str(wrapper), name, "--stop-after", "15", "--", sys.executable, "-c"]
        own = {**env, "SUPERVISOR_PROCESS_NAME": name}  # as supervisord names each program
        leaders.append(subprocess.Popen([*command, program(name, linger)], env=own, start_new_session=True))
    try:
        deadline = time.monotonic() + 10
        while not all((tmp_path / n).exists() for n in ("kafka", "archiver", "api")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all((tmp_path / n).exists() for n in ("kafka", "archiver", "api")), "the three programs started"
        supervisor = ProcessSupervisor(tmp_path)
        assert supervisor.end_orphans(timeout_s=20, last=["kafka"], only=["kafka", "archiver"]) == 4
        assert log.read_text().split() == ["archiver", "kafka"], "the store after the platform's process"
        assert [p for p in supervisor.orphans()], "api was not asked for: it runs on"
    finally:
        for leader in leaders:
            leader.kill()
            leader.wait(10)
        for proc in ProcessSupervisor(tmp_path).orphans():
            proc.kill()


@pytest.mark.parametrize("pid", [-1, 0, True])
def test_a_pid_file_naming_no_process_id_is_no_record(tmp_path, pid):
    """`"pid": -1` made every `status`, `up` and `down` raise ValueError (psutil refuses it)."""
    procs = ProcessSupervisor(tmp_path)
    procs.pid_file("api").parent.mkdir(parents=True, exist_ok=True)
    procs.pid_file("api").write_text(json.dumps({"pid": pid, "create_time": 1.0, "command": ["x"]}))
    assert procs.record("api") is None and procs.process("api") is None
