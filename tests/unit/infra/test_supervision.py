"""Unit tests of the supervision of the platform's processes: the supervisord configuration (read
back by supervisord's own parser), the restart budget, and the event listener's decisions. No service."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from xmlrpc.client import Fault

import pytest

from definitions.settings import Settings
from infra import services as svc
from infra.errors import StackError
from infra.process import STATE_TAG
from infra.restart_listener import Listener, exit_reason
from infra.restarts import Budget
from infra.supervisor_config import LISTENER, Program, render_config, socket_path
from stores.restarts import read_status, restart_report


def _settings(tmp_path: Path, **stack) -> Settings:
    return Settings(state_dir=tmp_path / "state", stack={"managed_services": ["api", "archiver"], **stack})


def _programs(settings: Settings) -> list[Program]:
    env = {
        "JAVA_HOME": "/usr/lib/jvm/x",
        "LAMBDA_STATE_DIR": str(settings.state_dir),
        STATE_TAG: str(settings.state_dir),
    }
    return [
        Program("api", ["/venv/bin/python", "-m", "api.server"], settings.state_dir / "api", env),
        Program(
            "archiver",
            ["/venv/bin/python", "-m", "ingest.archiver", "--say", "50% done, it's fine"],
            settings.state_dir / "archiver",
            env,
            "program",
        ),
    ]


def _parsed(settings: Settings, text: str):
    """The configuration as supervisord itself reads it."""
    from supervisor.options import ServerOptions

    path = settings.state_dir / "supervisor" / "supervisord.conf"
    for folder in (path.parent, settings.state_dir / "logs"):
        folder.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    options = ServerOptions()
    options.realize(args=["-c", str(path)])
    return options, {group.name: group for group in options.process_group_configs}


def test_config_is_read_by_supervisord_with_every_program_restarted_by_the_listener_only(tmp_path):
    settings = _settings(tmp_path, log_max_bytes=2**20, log_backups=3, start_s=4, stop_timeout_s=25)
    options, groups = _parsed(settings, render_config(settings, _programs(settings)))
    assert set(groups) == {"api", "archiver", LISTENER}
    logs = settings.state_dir / "logs"
    assert options.logfile == str(logs / "supervisord.log") and options.logfile_maxbytes == 2**20
    assert options.nodaemon and options.silent
    assert options.serverurl == f"unix://{socket_path(settings.state_dir)}"
    for name in ("api", "archiver"):
        [proc] = groups[name].process_configs
        assert proc.autostart is False and proc.autorestart is False and proc.startretries == 0
        assert proc.startsecs == 4 and proc.stopwaitsecs == 25
        assert proc.stopasgroup and proc.killasgroup and proc.redirect_stderr
        assert proc.stdout_logfile == str(logs / f"{name}.log")
        assert (proc.stdout_logfile_maxbytes, proc.stdout_logfile_backups) == (2**20, 3)
        assert proc.directory == str(settings.state_dir / name)
        assert proc.environment == {
            "JAVA_HOME": "/usr/lib/jvm/x",
            "LAMBDA_STATE_DIR": str(settings.state_dir),
            STATE_TAG: str(settings.state_dir),
        }
    [archiver] = groups["archiver"].process_configs
    assert shlex.split(archiver.command)[-2:] == ["--say", "50% done, it's fine"], "quoted and %-escaped"
    # The archiver's session yields the CPU (stack.cpu_nice); the API, not named, does not.
    nice = settings.stack.cpu_nice["archiver"]
    assert shlex.split(archiver.command)[6:11] == ["--cpu-nice", str(nice), "--stops", "program", "--"] and nice > 0
    [api] = groups["api"].process_configs
    assert "--cpu-nice" not in shlex.split(api.command) and "--stops" not in shlex.split(api.command)
    [listener] = groups[LISTENER].process_configs
    args = shlex.split(listener.command)
    assert args[args.index("--programs") + 1] == "api,archiver"
    assert args[args.index("--max-restarts") + 1] == str(settings.stack.restart_max)
    assert listener.autorestart and listener.stderr_logfile == str(logs / "restarts.log")
    # The Spark drivers stop their queries through their JVMs: the stop signal reaches the driver alone.
    assert {p.name for p in svc.ALL if p.stops == "program"} == {"archiver", "speed-layer"}


@pytest.mark.parametrize(
    "cpu_nice, named",
    [({"kafka": 5}, "none of the supervised"), ({"api": -5}, "from 0 to 19"), ({"speed-layer": 20}, "from 0 to 19")],
)
def test_cpu_nice_names_supervised_processes_and_nice_values(tmp_path, cpu_nice, named):
    with pytest.raises(ValueError, match=named):
        _settings(tmp_path, cpu_nice=cpu_nice)


def test_a_percent_sign_in_the_state_dir_survives_supervisords_interpolation(tmp_path):
    # The settings refuse a % in state_dir (logback and Cassandra's file URI read it); the rendering
    # escapes it all the same, for every other value that reaches supervisord's configuration.
    settings = Settings(state_dir=tmp_path / "state", stack={"managed_services": ["api"]})
    object.__setattr__(settings, "state_dir", tmp_path / "100%(here)s%state")
    options, groups = _parsed(settings, render_config(settings, _programs(settings)[:1]))
    [api] = groups["api"].process_configs
    [listener] = groups[LISTENER].process_configs
    assert api.directory == str(settings.state_dir / "api")
    assert api.stdout_logfile == str(settings.state_dir / "logs" / "api.log")
    assert api.environment["LAMBDA_STATE_DIR"] == str(settings.state_dir)
    assert listener.stderr_logfile == str(settings.state_dir / "logs" / "restarts.log")
    assert shlex.split(listener.command)[shlex.split(listener.command).index("--state-dir") + 1] == str(
        settings.state_dir
    )
    assert options.logfile == str(settings.state_dir / "logs" / "supervisord.log")


def test_values_supervisord_cannot_carry_are_refused(tmp_path):
    settings = _settings(tmp_path)
    bad = Program("api", ["python"], settings.state_dir, {"X": 'has "quotes"'})
    with pytest.raises(StackError, match="environment"):
        render_config(settings, [bad])
    with pytest.raises(StackError, match="line break"):
        render_config(settings, [Program("api", ["python", "a\nb"], settings.state_dir, {})])


@pytest.mark.parametrize("odd", ["/opt/jdk #17", "/opt/jdk ;17", "/opt/jdk\t#17"])
def test_a_value_supervisord_would_cut_at_a_comment_sign_is_refused(tmp_path, odd):
    """supervisord reads ` #` and ` ;` inside a value as the start of a comment: a JAVA_HOME or a
    state folder holding one was cut short there, and the program ran with the rest lost."""
    settings = _settings(tmp_path)
    with pytest.raises(StackError, match="comment"):
        render_config(settings, [Program("api", ["python"], settings.state_dir, {"JAVA_HOME": odd})])
    with pytest.raises(StackError, match="comment"):
        render_config(settings, [Program("api", ["python"], tmp_path / odd.lstrip("/"), {})])
    fine = Program("api", ["python", "--say", "a#b;c"], settings.state_dir, {"JAVA_HOME": "/opt/a#b;c"})
    _, groups = _parsed(settings, render_config(settings, [fine]))
    [api] = groups["api"].process_configs
    assert api.environment["JAVA_HOME"] == "/opt/a#b;c"
    assert shlex.split(api.command)[-1] == "a#b;c"


def test_socket_path_stays_within_the_unix_socket_limit(tmp_path):
    assert socket_path(tmp_path) == tmp_path / "supervisor" / "supervisord.sock"
    deep = tmp_path / ("d" * 120)
    assert len(str(socket_path(deep))) <= 100
    assert socket_path(deep) != socket_path(tmp_path / ("e" * 120))


def test_the_socket_stays_where_up_put_it_whatever_the_temp_dir_of_a_later_command(tmp_path, monkeypatch):
    """`up` (or `status`) from a shell, cron job or unit whose TMPDIR differs looked for the socket
    elsewhere: the supervisor seemed not to answer, and `up` replaced it (every process stopped)."""
    import tempfile

    from infra.supervisor_config import private_socket_dir

    for folder in ("tmp-a", "tmp-b"):
        (tmp_path / folder).mkdir()
    deep = tmp_path / ("d" * 120)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp-a"))
    made = private_socket_dir(deep)
    assert made.parent == tmp_path / "tmp-a"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp-b"))
    assert socket_path(deep).parent == made and private_socket_dir(deep, make=False) == made


def test_a_socket_directory_in_the_temp_dir_is_this_users_own_or_refused(tmp_path, monkeypatch):
    """A state directory too long for a unix socket puts it in the shared temp dir: under a name
    another user could make first, to hold its place or answer lambdactl in supervisord's stead."""
    import os
    import tempfile

    from infra.errors import StackError
    from infra.supervisor_config import private_socket_dir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    deep = tmp_path / ("d" * 120)
    folder = private_socket_dir(deep)
    assert folder == socket_path(deep).parent and folder.parent == tmp_path / "tmp"
    assert folder.stat().st_mode & 0o777 == 0o700
    folder.chmod(0o777)  # as if another user had made it open to all
    with pytest.raises(StackError, match="not a directory only this user may enter"):
        private_socket_dir(deep)
    with pytest.raises(PermissionError):  # a probe (lambdactl status): supervisord is not answering
        private_socket_dir(deep, make=False)
    folder.chmod(0o700)
    monkeypatch.setattr(os, "geteuid", lambda: 4321)  # made by another user (the name has that uid in it)
    other = socket_path(deep).parent
    other.mkdir(mode=0o700)
    with pytest.raises(StackError, match="not a directory only this user may enter"):
        private_socket_dir(deep)


def test_budget_doubles_the_backoff_and_gives_up_past_the_limit():
    budget = Budget(max_restarts=5, window_s=600, backoff_s=1, backoff_max_s=60)
    restarts: list[float] = []
    delays = []
    for t in range(6):
        delays.append(budget.delay(restarts, now=100 + t))
        restarts.append(100 + t)
    assert delays == [1, 2, 4, 8, 16, None]
    assert budget.delay(restarts[:5], now=100 + 600 + 5) == 1, "restarts older than the window no longer count"
    assert Budget(10, 600, 1, 60).delay([0.0] * 8, now=1) == 60, "the backoff stops growing at its maximum"
    many = Budget(5_000, 600, 1, 60)
    assert many.delay([0.0] * 2_000, now=1) == 60, "past a thousand restarts the doubling overflowed a float"


class FakeSupervisord:
    def __init__(self, fail_with: Exception | None = None) -> None:
        self.started: list[str] = []
        self.fail_with = fail_with

    def getPID(self) -> int:
        return 4242

    def getProcessInfo(self, name: str) -> dict:
        return {"name": name, "spawnerr": "", "exitstatus": 3}

    def getAllProcessInfo(self) -> list[dict]:
        return []

    def startProcess(self, name: str, wait: bool) -> bool:
        if self.fail_with:
            raise self.fail_with
        self.started.append(name)
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _listener(tmp_path: Path, budget: Budget, rpc=None) -> tuple[Listener, FakeSupervisord, Clock]:
    rpc = rpc or FakeSupervisord()
    clock = Clock()
    (tmp_path / "logs").mkdir(parents=True, exist_ok=True)
    (tmp_path / "logs" / "api.log").write_text("starting\nTraceback: boom\n")
    return Listener(tmp_path, budget, ["api"], type("Rpc", (), {"supervisor": rpc})(), clock=clock), rpc, clock


def _event(listener: Listener, state: str, **fields) -> None:
    listener.handle(
        f"PROCESS_STATE_{state}",
        " ".join(f"{k}:{v}" for k, v in {"processname": "api", "groupname": "api", **fields}.items()),
    )


def test_listener_restarts_with_backoff_and_gives_up_on_a_restart_loop(tmp_path):
    listener, rpc, clock = _listener(tmp_path, Budget(max_restarts=2, window_s=600, backoff_s=1, backoff_max_s=60))
    _event(listener, "STARTING", tries=0)
    _event(listener, "RUNNING", pid=999_999_001)
    clock.now += 30
    _event(listener, "EXITED", expected=0, pid=999_999_001)
    entry = read_status(tmp_path)["processes"]["api"]
    assert entry["state"] == "restarting" and entry["next_restart_at"] == clock.now + 1
    assert entry["last_exit"]["reason"] == "exit status 3" and entry["last_exit"]["uptime_s"] == 30
    assert entry["last_exit"]["log_tail"] == ["starting", "Traceback: boom"]
    listener.run_due()
    assert rpc.started == [], "not before the backoff has passed"
    clock.now += 1
    listener.run_due()
    assert rpc.started == ["api"]
    _event(listener, "STARTING", tries=0)  # the listener's own restart: the budget goes on
    _event(listener, "BACKOFF", tries=1)  # died while starting …
    _event(listener, "FATAL")  # … and supervisord gave up at once (startretries=0)
    assert listener.next_due() == clock.now + 2, "the second restart waits twice as long"
    clock.now += 2
    listener.run_due()
    _event(listener, "STARTING", tries=0)
    _event(listener, "RUNNING", pid=999_999_002)
    _event(listener, "EXITED", expected=0, pid=999_999_002)
    entry = read_status(tmp_path)["processes"]["api"]
    assert entry["state"] == "gave up" and entry["gave_up_at"] == clock.now and entry["next_restart_at"] is None
    assert entry["restarts"] == 2 and rpc.started == ["api", "api"]
    report = restart_report(Settings(state_dir=tmp_path))["api"]
    assert report["gave_up"] and report["restarts"] == 2 and report["last_reason"] == "exit status 3"
    assert "log_tail" not in report, "log lines stay out of the report unless asked for"
    assert "restart loop" in report["summary"]

    _event(listener, "STARTING", tries=0)  # started by hand (`lambdactl up`): a fresh budget
    entry = read_status(tmp_path)["processes"]["api"]
    assert entry["gave_up_at"] is None and entry["restarts"] == 0 and entry["recent"] == []
    assert entry["restarts_total"] == 2


def test_a_stop_on_purpose_cancels_a_pending_restart(tmp_path):
    listener, rpc, clock = _listener(tmp_path, Budget(5, 600, 10, 60))
    _event(listener, "STARTING", tries=0)
    _event(listener, "EXITED", expected=0, pid=999_999_003)
    assert listener.next_due() is not None
    _event(listener, "STOPPED", pid=0)
    assert listener.next_due() is None
    clock.now += 100
    listener.run_due()
    assert rpc.started == []


def test_a_restart_refused_by_supervisord_is_not_retried_but_a_lost_connection_is(tmp_path):
    listener, rpc, clock = _listener(
        tmp_path, Budget(5, 600, 1, 60), FakeSupervisord(Fault(60, "ALREADY_STARTED: api"))
    )
    _event(listener, "EXITED", expected=0, pid=999_999_004)
    clock.now += 1
    listener.run_due()
    assert listener.next_due() is None
    rpc.fail_with = ConnectionRefusedError("gone")
    _event(listener, "EXITED", expected=0, pid=999_999_005)
    clock.now += 5
    listener.run_due()
    assert listener.next_due() == clock.now + 1


def test_exit_reason_is_read_from_supervisords_log_when_recent(tmp_path):
    log = tmp_path / "supervisord.log"
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    log.write_text(
        f"{stamp},123 WARN exited: api (exit status 1; not expected)\n"
        f"{stamp},456 WARN exited: speed-layer (terminated by SIGKILL; not expected)\n"
        f"{stamp},789 INFO spawned: 'api' with pid 7\n"
    )
    assert exit_reason(log, "speed-layer", now) == "terminated by SIGKILL"
    assert exit_reason(log, "api", now) == "exit status 1"
    assert exit_reason(log, "api", now + 3600) is None, "an old line is not this exit's reason"
    assert exit_reason(log, "archiver", now) is None


def test_the_configuration_does_not_depend_on_which_name_of_the_interpreter_ran_up(tmp_path, monkeypatch):
    import sys

    settings = _settings(tmp_path)
    bin_dir = Path(sys.prefix) / "bin"
    texts = set()
    for name in ("python", "python3"):
        monkeypatch.setattr(sys, "executable", str(bin_dir / name))
        texts.add(render_config(settings, [Program("api", [sys.executable, "-m", "api.server"], tmp_path, {})]))
    assert len(texts) == 1, "an `up` from `python` and one from `python3` would restart every process"


def test_a_listener_that_dies_during_a_restart_keeps_the_budget_going(tmp_path):
    """The listener's own restarts were known from its memory only: one that died once it had asked
    supervisord to start a program took the STARTING that followed, seen by the next listener, for a
    start by hand, and the budget began afresh: a program in a restart loop was never given up on."""
    budget = Budget(max_restarts=5, window_s=600, backoff_s=1, backoff_max_s=60)
    listener, rpc, clock = _listener(tmp_path, budget)
    _event(listener, "STARTING", tries=0)
    _event(listener, "EXITED", expected=0, pid=999_999_006)
    clock.now += 1
    listener.run_due()
    assert rpc.started == ["api"]
    before = read_status(tmp_path)["processes"]["api"]["restarts"]
    assert before == 1
    # The listener dies here; supervisord starts another, which reads the file and gets the event.
    successor = Listener(tmp_path, budget, ["api"], type("Rpc", (), {"supervisor": rpc})(), clock=clock)
    clock.now += 0.5
    _event(successor, "STARTING", tries=0)
    assert read_status(tmp_path)["processes"]["api"]["restarts"] == before, "its own restart, not one by hand"
    clock.now += 3_600
    _event(successor, "STARTING", tries=0)  # long after: started by hand, a fresh budget
    assert read_status(tmp_path)["processes"]["api"]["restarts"] == 0


def test_down_asks_every_program_to_stop_at_once_before_supervisord_stops(tmp_path):
    """supervisord stops its programs one after another, and `down` gave it stop_timeout_s + 15 in
    all: under load the later programs (the archiver, Airflow's scheduler with a batch task) were
    SIGKILLed instead of stopping cleanly."""
    from infra.supervision import LISTENER, Supervisord

    calls: list[str] = []

    class Rpc:
        """Programs that take a while to stop: STOPPING until asked twice how they are."""

        states = {"speed-layer": "RUNNING", "archiver": "RUNNING", "api": "EXITED", LISTENER: "RUNNING"}
        asked = 0

        def getAllProcessInfo(self):
            self.asked += 1
            if self.asked == 2:  # the listener restarts the API, whose restart came due meanwhile
                self.states["api"] = "STARTING"
            if self.asked > 3:
                self.states.update({n: "STOPPED" for n, s in self.states.items() if s == "STOPPING"})
            return [{"name": n, "group": n, "statename": s} for n, s in self.states.items()]

        def stopProcess(self, name, wait):
            calls.append(f"stop {name} wait={wait}")
            self.states[name.split(":")[0]] = "STOPPING"

    rpc = Rpc()

    class Procs:
        def stop(self, name, timeout_s):
            calls.append(f"stop supervisord: {', '.join(f'{n} {s}' for n, s in sorted(rpc.states.items()))}")
            return True

    supervisord = Supervisord(Settings(state_dir=tmp_path), Procs())
    supervisord.answering = lambda: True  # type: ignore[method-assign]
    supervisord.running = lambda: True  # type: ignore[method-assign]
    supervisord.rpc = lambda timeout_s=10.0: rpc  # type: ignore[method-assign]
    assert supervisord.shutdown()
    assert calls == [
        "stop speed-layer:speed-layer wait=False",
        "stop archiver:archiver wait=False",
        "stop api:api wait=False",
        f"stop supervisord: api STOPPED, archiver STOPPED, {LISTENER} RUNNING, speed-layer STOPPED",
    ], calls


def test_a_broken_connection_to_supervisord_is_made_again_not_reused_for_ever(tmp_path):
    """Seen on the live stack: the listener's first call after an hour idle hit a connection
    supervisord had closed (BrokenPipeError); the client then answered CannotSendRequest to every
    later call, and the exited speed layer was never restarted."""
    from http.client import CannotSendRequest

    broken = FakeSupervisord(BrokenPipeError(32, "Broken pipe"))
    fresh = FakeSupervisord()
    made: list[FakeSupervisord] = []

    def reconnect():
        made.append(fresh)
        return type("Rpc", (), {"supervisor": fresh})()

    listener, _, clock = _listener(tmp_path, Budget(5, 600, 1, 60), broken)
    listener.rpc_factory = reconnect
    _event(listener, "EXITED", expected=0, pid=999_999_006)
    clock.now += 1
    listener.run_due()  # the broken connection fails once ...
    broken.fail_with = CannotSendRequest("Request-sent")  # ... and would fail every call after
    clock.now += 1
    listener.run_due()
    assert made and fresh.started == ["api"], "restarted over a connection made again"


def test_a_restart_record_that_cannot_be_written_leaves_the_restarts_going(tmp_path, monkeypatch):
    """A full disk made every save raise: the listener died, and once supervisord stopped starting
    it again, no process of the platform was restarted."""
    import infra.restart_listener as restart_listener

    listener, rpc, clock = _listener(tmp_path, Budget(max_restarts=5, window_s=600, backoff_s=1, backoff_max_s=60))
    _event(listener, "RUNNING", pid=999_999_001)

    def full(state_dir, doc):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(restart_listener, "write_status", full)
    _event(listener, "EXITED", expected=0, pid=999_999_001)
    clock.now += 1
    listener.run_due()
    assert rpc.started == ["api"]


class _StoppingRpc:
    """supervisord's XML-RPC for programs that stop one look after they were asked to."""

    def __init__(self, states: dict[str, str], calls: list[str], changed: list[str] = ()) -> None:
        self.states, self.calls, self.changed = states, calls, list(changed)

    def getAllProcessInfo(self):
        out = [{"name": n, "group": n, "statename": s} for n, s in self.states.items()]
        self.states.update({n: "STOPPED" for n, s in self.states.items() if s == "STOPPING"})
        return out

    def stopProcess(self, name, wait):
        name = name.split(":")[0]
        self.calls.append(f"stop {name} ({', '.join(sorted(n for n, s in self.states.items() if s == 'RUNNING'))} ran)")
        self.states[name] = "STOPPING"

    def reloadConfig(self):
        return [[[], self.changed, []]]

    def stopProcessGroup(self, name):
        self.calls.append(f"group {name} {self.states[name]}")

    def removeProcessGroup(self, name):
        pass

    def addProcessGroup(self, name):
        pass


def _supervisord_over(tmp_path, rpc):
    from infra.supervision import Supervisord

    supervisord = Supervisord(
        Settings(state_dir=tmp_path), type("Procs", (), {"stop": lambda self, name, timeout_s: True})()
    )
    supervisord.answering = lambda: True  # type: ignore[method-assign]
    supervisord.running = lambda: True  # type: ignore[method-assign]
    supervisord.rpc = lambda timeout_s=10.0: rpc  # type: ignore[method-assign]
    return supervisord


def test_the_stores_stop_once_the_platforms_processes_have_stopped(tmp_path):
    """On down, and on an `up` that changed every program's entry (supervisord lists the stores,
    of a lower priority, first): Kafka went while the archiver still wrote to it."""
    calls: list[str] = []
    rpc = _StoppingRpc({"kafka": "RUNNING", "archiver": "RUNNING", "api": "RUNNING"}, calls)
    assert _supervisord_over(tmp_path, rpc).shutdown(last=["kafka"])
    assert calls == ["stop archiver (api, archiver, kafka ran)", "stop api (api, kafka ran)", "stop kafka (kafka ran)"]

    calls.clear()
    rpc = _StoppingRpc({"kafka": "RUNNING", "archiver": "RUNNING", "api": "RUNNING"}, calls, ["kafka", "archiver"])
    assert _supervisord_over(tmp_path, rpc)._update(last=["kafka"])
    assert calls == [
        "stop archiver (api, archiver, kafka ran)",
        "stop kafka (api, kafka ran)",
        "group kafka STOPPED",
        "group archiver STOPPED",
    ], "the changed programs stop, the store last; the API's entry did not change: it runs on"


def test_a_supervisord_that_does_not_answer_is_killed_alone(tmp_path):
    """Its stop (a SIGTERM, then SIGKILL to its whole tree after stop_timeout_s + 15) killed every
    store it ran, in no order: killed alone, its programs are left for the ordered orphans' stop."""
    import subprocess
    import sys

    import psutil

    from infra.supervision import Supervisord
    from tests.support.polling import wait_for

    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"],
        start_new_session=True,
    )
    try:
        wait_for(lambda: psutil.Process(parent.pid).children(), "the program to start", timeout_s=10)
        [program] = psutil.Process(parent.pid).children()
        stopped: list[str] = []

        class Procs:
            def process(self, name):
                return psutil.Process(parent.pid) if parent.poll() is None else None

            def stop(self, name, timeout_s):
                stopped.append(name)
                return False

        supervisord = Supervisord(Settings(state_dir=tmp_path), Procs())
        supervisord.answering = lambda: False  # type: ignore[method-assign]
        assert supervisord.shutdown()
        assert not psutil.pid_exists(parent.pid) or psutil.Process(parent.pid).status() == psutil.STATUS_ZOMBIE
        assert program.is_running(), "supervisord killed alone: its program runs on"
    finally:
        for proc in psutil.Process(parent.pid).children() if parent.poll() is None else []:
            proc.kill()
        program.kill()
        parent.kill()


def test_a_changed_program_still_stopping_is_removed_once_it_has_stopped(tmp_path, monkeypatch):
    """Past the wait for the stop, a program still STOPPING made removeProcessGroup fail the `up`
    with supervisord's raw STILL_RUNNING fault."""
    import xmlrpc.client

    from infra import supervision

    calls: list[str] = []
    rpc = _StoppingRpc({"archiver": "RUNNING"}, calls, ["archiver"])
    refusals = iter([True, True, False])

    def remove(name):
        if next(refusals):
            raise xmlrpc.client.Fault(91, "STILL_RUNNING: archiver")
        calls.append(f"removed {name}")

    rpc.removeProcessGroup = remove  # type: ignore[method-assign]
    monkeypatch.setattr(supervision.time, "sleep", lambda _s: None)
    assert _supervisord_over(tmp_path, rpc)._update()
    assert calls[-1] == "removed archiver", calls


def test_an_up_of_some_services_does_not_replace_a_supervisord_that_does_not_answer(tmp_path):
    """Replacing it stops every process it ran: `Stack(settings, ["cassandra"]).up()` brought the
    whole stack down and started Cassandra alone. Only an `up` of the whole stack replaces it."""
    from infra.errors import StackError
    from infra.supervision import Supervisord

    stops: list[str] = []
    procs = type(
        "Procs",
        (),
        {
            "process": lambda self, name: None,
            "stop": lambda self, name, timeout_s: stops.append(name) or True,
            "end_orphans": lambda self, *a, **k: stops.append("orphans") or 0,
        },
    )()
    supervisord = Supervisord(Settings(state_dir=tmp_path), procs)
    supervisord.running = lambda: True  # type: ignore[method-assign]
    supervisord.answering = lambda: False  # type: ignore[method-assign]
    with pytest.raises(StackError, match="did not answer within 0s"):
        supervisord.ensure([], {}, timeout_s=0, replace_hung=False)
    assert stops == [], "nothing stopped"


def _killed_mid_write(monkeypatch) -> None:
    """Every Path.write_text writes half its text, then the process 'dies' (raises); a write synced
    before its rename dies at the sync, its text written."""
    import os
    from pathlib import Path

    real = Path.write_text

    def half(self, text, *args, **kwargs):
        real(self, text[: len(text) // 2], *args, **kwargs)
        raise KeyboardInterrupt("killed")

    def dies(fd):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(Path, "write_text", half)
    monkeypatch.setattr(os, "fsync", dies)


def test_an_up_killed_while_writing_the_configuration_leaves_the_one_before(tmp_path, monkeypatch):
    """Written in place, a killed `up` left supervisord.conf cut short: the next `up` read no digest
    for the programs it lost, and stopped them for a change there was none of."""
    from infra.supervision import Supervisord
    from infra.supervisor_config import config_path

    supervisord = Supervisord(Settings(state_dir=tmp_path), object())
    supervisord.running = lambda: True  # type: ignore[method-assign]
    supervisord._wait_answering = lambda timeout_s: True  # type: ignore[method-assign]
    supervisord._update = lambda last=(): False  # type: ignore[method-assign]
    supervisord._ensure_listener = lambda: None  # type: ignore[method-assign]
    conf = config_path(tmp_path)
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("[supervisord]\n; the configuration before\n")
    _killed_mid_write(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        supervisord.ensure([], {}, timeout_s=0)
    assert conf.read_text() == "[supervisord]\n; the configuration before\n"


def test_a_store_configuration_is_never_left_cut_short(tmp_path, monkeypatch):
    from infra.service_base import render_template

    target = tmp_path / "core-site.xml"
    target.write_text("<configuration/>\n")
    _killed_mid_write(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        render_template("hadoop/core-site.xml", target, host="127.0.0.1", port=9000, tmp_dir="/x")
    assert target.read_text() == "<configuration/>\n"
    assert [p.name for p in tmp_path.iterdir()] == ["core-site.xml"], "no part left beside it"


class _SpawnFailing(FakeSupervisord):
    def getProcessInfo(self, name: str) -> dict:
        return {
            "name": name,
            "spawnerr": "can't find command '/home/ops/secret-path/.venv/bin/python'",
            "exitstatus": 0,
        }


def test_the_report_names_a_start_that_failed_without_its_text_unless_asked_for_the_log(tmp_path):
    """The API's /health shows the report without a token: supervisord's words for a start that
    failed name the command's path on the host."""
    listener, _rpc, _clock = _listener(
        tmp_path, Budget(max_restarts=2, window_s=600, backoff_s=1, backoff_max_s=60), _SpawnFailing()
    )
    _event(listener, "STARTING", tries=0)
    _event(listener, "BACKOFF", tries=1)
    report = restart_report(Settings(state_dir=tmp_path))["api"]
    shown = json.dumps(report)
    assert "secret-path" not in shown, shown
    assert report["last_reason"] == "could not be started (the supervisor's log says why)", report
    operators = restart_report(Settings(state_dir=tmp_path), with_log=True)["api"]
    assert "secret-path" in operators["last_reason"], "an operator's status keeps supervisord's words"


@pytest.mark.parametrize(
    "reason",
    [
        "exit status 3",
        "terminated by SIGKILL",
        "terminated by SIGABRT (core dumped)",
        "terminated by signal 35",
        "Bad exit code 1",
        "Exited too quickly (process log may have details)",
        "exited (supervisord did not say how)",
        "unknown termination cause 0x7f",
    ],
)
def test_supervisords_own_words_for_an_exit_stay_in_the_report(tmp_path, reason):
    from stores.restarts import _plain

    entry = {"last_exit": {"reason": reason}}
    assert _plain(entry)["last_exit"]["reason"] == reason


def test_a_log_of_huge_lines_keeps_the_restart_record_small(tmp_path):
    """The last lines of a log of 17 MB of invalid bytes went whole into restarts.json (82 MB,
    rewritten at every event, read by every status and every /health)."""
    from infra.process import MAX_TAIL_LINE_CHARS, MAX_TAIL_TOTAL_CHARS
    from stores.restarts import status_path

    listener, _rpc, clock = _listener(tmp_path, Budget(max_restarts=2, window_s=600, backoff_s=1, backoff_max_s=60))
    (tmp_path / "logs" / "api.log").write_bytes((b"\xff" * 700_000 + b"\n") * 25)
    _event(listener, "STARTING", tries=0)
    _event(listener, "RUNNING", pid=999_999_001)
    clock.now += 30
    _event(listener, "EXITED", expected=0, pid=999_999_001)
    tail = read_status(tmp_path)["processes"]["api"]["last_exit"]["log_tail"]
    assert tail and all(len(line) <= MAX_TAIL_LINE_CHARS + 1 for line in tail)
    assert sum(len(line) for line in tail) <= MAX_TAIL_TOTAL_CHARS + len(tail)
    assert status_path(tmp_path).stat().st_size < 200_000, status_path(tmp_path).stat().st_size


@pytest.mark.parametrize(
    "entry",
    [
        [],
        {"restarts": "x"},
        {"last_exit": "boom"},
        {"gave_up_at": "yesterday"},
        {"recent": "abc"},
        {"recent": [1, "x"]},
        {"next_restart_at": 1e400},
        {"pid": -1},
        {"last_exit": {"at": "noon", "log_tail": "one"}},
    ],
    ids=repr,
)
def test_a_mistyped_restart_entry_is_passed_over_not_a_crash_of_status_or_the_listener(tmp_path, entry):
    """Each made `lambdactl status` (and /health) raise, or the listener crash-loop at its start
    (nothing restarted any more)."""
    from infra.restart_listener import Listener
    from stores.restarts import restart_report, status_path

    status_path(tmp_path).parent.mkdir(parents=True, exist_ok=True)
    doc = {"processes": {"api": entry, "archiver": {"state": "RUNNING", "restarts": 1}}}
    status_path(tmp_path).write_text(json.dumps(doc).replace("Infinity", "1e400"))
    report = restart_report(Settings(state_dir=tmp_path))
    assert "api" not in report and report["archiver"]["restarts"] == 1
    listener = Listener(tmp_path, Budget(5, 600, 1, 60), ["api"], type("Rpc", (), {"supervisor": FakeSupervisord()})())
    listener.reconcile()
    assert listener.doc["processes"]["api"]["recent"] == []
