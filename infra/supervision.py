"""supervisord for every process of the stack: the stores (Kafka, HDFS, HBase, Cassandra, a Spark
cluster's daemons) and the platform's own processes (archiver, speed layer, API, Airflow).

`lambdactl up` writes `<state_dir>/supervisor/supervisord.conf` (infra/supervisor_config.py) and
starts supervisord once (with a pid file of its own: infra/process.py). supervisord starts each
process through a session leader (infra/session_leader.py: a session, so a CPU share, of its own),
stops it as a group, writes its output to `<state_dir>/logs/<name>.log` rotated by size, and
answers XML-RPC on a unix socket. Restarts are
decided by the event listener infra/restart_listener.py (backoff and a restart budget, which
supervisord's own `autorestart` lacks), so every program runs with `autorestart=false` and
`startretries=0`: every exit goes to the listener.
"""

from __future__ import annotations

import fcntl
import logging
import time
import xmlrpc.client
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from definitions.files import replace_text
from definitions.settings import Settings
from infra.errors import StackError
from infra.process import ProcessRecord, ProcessSupervisor, tail_file
from infra.supervisor_config import (
    LISTENER,
    NAME,
    SESSION_LEADER,
    Program,
    config_path,
    private_socket_dir,
    program_process,
    python_executable,
    render_config,
    socket_path,
)
from stores.restarts import supervisor_dir

log = logging.getLogger(__name__)


def _transport(path: Path, timeout_s: float) -> xmlrpc.client.Transport:
    """supervisor's XML-RPC transport over its unix socket, with a timeout on the socket."""
    from supervisor.xmlrpc import SupervisorTransport, UnixStreamHTTPConnection

    class _Connection(UnixStreamHTTPConnection):
        def connect(self) -> None:
            super().connect()
            self.sock.settimeout(timeout_s)

    transport = SupervisorTransport(None, None, f"unix://{path}")

    def connection() -> UnixStreamHTTPConnection:
        conn = _Connection("localhost")
        conn.socketfile = str(path)
        return conn

    transport._get_connection = connection
    return transport


class Supervisord:
    """supervisord of one state directory: its config, its process, its XML-RPC."""

    def __init__(self, settings: Settings, procs: ProcessSupervisor) -> None:
        self.settings = settings
        self.procs = procs
        self.state_dir = settings.state_dir

    def rpc(self, timeout_s: float = 10.0) -> Any:
        folder = private_socket_dir(self.state_dir, make=False)
        transport = _transport(folder / socket_path(self.state_dir).name, timeout_s)
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport).supervisor

    def running(self) -> bool:
        """supervisord's process is alive (its pid file says so)."""
        return self.procs.process(NAME) is not None

    def answering(self) -> bool:
        if not self.running():
            return False
        try:
            return self.rpc(timeout_s=5).getState()["statename"] == "RUNNING"
        except (OSError, xmlrpc.client.Error):
            return False

    _view: dict[str, dict[str, Any]] | None = None  # within one_view(): the one answer all_info() gives

    @contextmanager
    def one_view(self, answering: bool) -> Iterator[None]:
        """Within it, all_info() asks supervisord at most once, and not at all when it does not
        `answering`: `lambdactl status` asked twice per service, each up to 10 s while a stuck
        supervisord kept its socket open (minutes before any output)."""
        before = self._view  # within another: its answer stands
        self._view = before if before is not None else self.all_info() if answering else {}
        try:
            yield
        finally:
            self._view = before

    def all_info(self) -> dict[str, dict[str, Any]]:
        """supervisord's view of each program (state, pid, start time …); empty when it does not run."""
        if self._view is not None:
            return self._view
        if not self.running():
            return {}
        try:
            return {info["name"]: info for info in self.rpc().getAllProcessInfo() if info["name"] != LISTENER}
        except (OSError, xmlrpc.client.Error):
            return {}

    def process(self, name: str) -> psutil.Process | None:
        info = self.all_info().get(name)
        if not info or not info.get("pid"):
            return None
        try:
            proc = program_process(psutil.Process(info["pid"]))
            return None if proc.status() == psutil.STATUS_ZOMBIE else proc
        except psutil.Error:
            return None

    def ensure(
        self,
        programs: Sequence[Program],
        env: Mapping[str, str],
        timeout_s: float = 60,
        last: Collection[str] = (),
        replace_hung: bool = True,
    ) -> str:
        """supervisord runs with this configuration: started, updated in place, or left as it was.
        The programs in `last` (every store, also one the configuration no longer has) are stopped
        after the others when a change stops them. One that runs but does not answer is replaced
        (its programs stopped) only with `replace_hung`: else StackError."""
        conf = config_path(self.state_dir)
        text = render_config(self.settings, programs)
        for folder in (conf.parent, self.state_dir / "logs"):
            folder.mkdir(parents=True, exist_ok=True)
        if self.running() and self._wait_answering(timeout_s):
            if not (conf.exists() and conf.read_text() == text):
                replace_text(conf, text)  # a killed `up` leaves the whole one before
            # Applied whatever the file says: an `up` stopped half-way through an update (after the
            # file was written, between removing a program and adding it back) left supervisord
            # without that program, and the file unchanged since.
            changed = self._update(last=last)
            self._ensure_listener()
            return "updated" if changed else "unchanged"
        if self.running():  # alive but not answering: start afresh, its programs stopped in order
            if not replace_hung:
                raise StackError(
                    NAME,
                    f"supervisord runs but did not answer within {timeout_s:.0f}s: `lambdactl up` of the whole "
                    "stack replaces it (stopping every process it ran, and starting them again)",
                )
            self._kill_alone()
            self.procs.stop(NAME, self.settings.stack.stop_timeout_s + 15)
            self.procs.end_orphans(self.settings.stack.stop_timeout_s, last=last)
        replace_text(conf, text)
        self.procs.start(
            NAME,
            [python_executable(), "-m", "supervisor.supervisord", "-c", str(conf)],
            cwd=supervisor_dir(self.state_dir),
            env=dict(env),
        )
        if not self._wait_answering(timeout_s):
            tail = "\n".join(
                t for t in (self.procs.tail(NAME, 20), tail_file(self.state_dir / "logs" / "supervisord.log", 20)) if t
            )
            raise StackError(
                NAME,
                f"supervisord did not answer within {timeout_s:.0f}s "
                f"(log: {self.state_dir / 'logs' / 'supervisord.log'})",
                tail,
            )
        return "started"

    @contextmanager
    def lock(self) -> Iterator[None]:
        """One `up` at a time changes the supervisor of a state directory (test sessions run `up` at once)."""
        path = supervisor_dir(self.state_dir) / "up.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _wait_answering(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.answering():
                return True
            if not self.running():
                return False
            time.sleep(0.2)
        return False

    def _update(self, last: Collection[str] = ()) -> bool:
        """Bring supervisord's programs in line with the configuration file (what `supervisorctl
        update` does: it compares the file with the programs supervisord runs); whether any changed.
        The programs whose entries changed or went are stopped first, those in `last` (the stores)
        once the others are: supervisord lists them lowest priority, so stores, first."""
        rpc = self.rpc(timeout_s=self.settings.stack.stop_timeout_s + 30)
        [[added, changed, removed]] = rpc.reloadConfig()
        self.stop_at_once(last=last, only=[*changed, *removed])
        for name in (*changed, *removed):
            rpc.stopProcessGroup(name)  # waits for one stopped by other means meanwhile
            for _ in range(120):  # one still STOPPING past the wait above: its stop is not over
                try:
                    rpc.removeProcessGroup(name)
                    break
                except xmlrpc.client.Fault as fault:
                    if "STILL_RUNNING" not in fault.faultString:
                        raise
                    time.sleep(0.5)
        for name in (*changed, *added):
            rpc.addProcessGroup(name)
        return bool(added or changed or removed)

    def listener_state(self) -> str:
        """supervisord's state of the restart listener (RUNNING, FATAL …); "UNKNOWN" when it cannot tell."""
        try:
            return str(self.rpc().getProcessInfo(LISTENER)["statename"])
        except (OSError, xmlrpc.client.Error):
            return "UNKNOWN"

    def _ensure_listener(self) -> None:
        rpc = self.rpc()
        if rpc.getProcessInfo(LISTENER)["statename"] not in ("RUNNING", "STARTING", "BACKOFF"):
            rpc.startProcess(LISTENER, False)

    def start(self, name: str) -> None:
        try:
            self.rpc().startProcess(name, False)
        except xmlrpc.client.Fault as fault:
            if "ALREADY_STARTED" not in fault.faultString:
                raise StackError(name, f"supervisord could not start it: {fault.faultString}") from None

    def stop(self, name: str) -> None:
        try:
            self.rpc(timeout_s=self.settings.stack.stop_timeout_s + 30).stopProcess(name, True)
        except xmlrpc.client.Fault as fault:
            if "NOT_RUNNING" not in fault.faultString:
                raise

    def take_out(self, name: str) -> None:
        """Stop a program and take it out of supervisord until the next `up` adds it back (_update):
        the restart listener cannot start it again meanwhile, also not a restart it had pending for
        a program that exited (stopping one that is not running changes nothing the listener sees)."""
        rpc = self.rpc(timeout_s=self.settings.stack.stop_timeout_s + 30)
        for _ in range(5):
            try:
                rpc.stopProcessGroup(name)
                rpc.removeProcessGroup(name)
                return
            except xmlrpc.client.Fault as fault:
                if "BAD_NAME" in fault.faultString:
                    return  # out already
                if "STILL_RUNNING" not in fault.faultString:
                    raise
                # started again (a restart that came due) between the stop and the removal: again
        raise StackError(name, "supervisord kept starting it again while it was being taken out")

    def shutdown(self, last: Collection[str] = ()) -> bool:
        """Stop supervisord and so every program it runs (each as a group); True if it ran. The
        programs are asked to stop all at once first (those named in `last`, the stores, once the
        others are stopped): supervisord stops them one after another, and under load the later
        ones met the deadline below as a SIGKILL. A supervisord that does not answer is killed
        alone: its programs run on, for the caller to stop in order (ProcessSupervisor.end_orphans)."""
        killed = self.running() and not self.answering() and self._kill_alone()
        self.stop_at_once(last)
        ran = self.procs.stop(NAME, self.settings.stack.stop_timeout_s + 15) or killed
        socket_path(self.state_dir).unlink(missing_ok=True)
        return ran

    def _kill_alone(self) -> bool:
        """SIGKILL to supervisord alone (its stop would end its programs' trees in no order); whether it ran."""
        proc = self.procs.process(NAME)
        if proc is None:
            return False
        log.warning("supervisord (pid %d) does not answer: killing it alone", proc.pid)
        try:
            proc.kill()
            psutil.wait_procs([proc], timeout=10)
        except psutil.Error:
            pass
        return True

    def stop_at_once(self, last: Collection[str] = (), only: Collection[str] | None = None) -> None:
        """Ask every running program (of `only`, when given) to stop, those in `last` once the
        others are stopped; each gets `stack.stop_timeout_s`, then supervisord's SIGKILL."""

        def wanted(name: str) -> bool:
            return only is None or name in only

        self._stop_programs_at_once(lambda name: wanted(name) and name not in last)
        self._stop_programs_at_once(wanted)

    def _stop_programs_at_once(self, chosen: Callable[[str], bool]) -> None:
        """Ask every chosen running program to stop, and wait until none runs. Asked again at each
        look: the restart listener still runs, and restarts a program whose restart came due
        meanwhile. A supervisord that does not answer is left to the stop."""
        if not self.answering():
            return
        deadline = time.monotonic() + self.settings.stack.stop_timeout_s + 10
        try:
            rpc = self.rpc(timeout_s=10)
            while True:
                running = [
                    info
                    for info in rpc.getAllProcessInfo()
                    if info["name"] != LISTENER
                    and chosen(info["name"])
                    and info["statename"] in ("RUNNING", "STARTING", "BACKOFF", "STOPPING")
                ]
                if not running:
                    return
                if time.monotonic() >= deadline:
                    log.warning("%s still stopping: supervisord stops them itself", [i["name"] for i in running])
                    return
                for info in running:
                    if info["statename"] != "STOPPING":
                        try:
                            rpc.stopProcess(f"{info['group']}:{info['name']}", False)
                        except xmlrpc.client.Fault as fault:  # NOT_RUNNING: it stopped meanwhile
                            if "NOT_RUNNING" not in fault.faultString:
                                log.warning("supervisord did not stop %s: %s", info["name"], fault.faultString)
                time.sleep(0.2)
        except (OSError, xmlrpc.client.Error) as exc:
            log.warning("could not ask supervisord to stop its programs at once (%s); it stops them itself", exc)


class StackProcesses(ProcessSupervisor):
    """The processes of a state directory, through supervisord (a process started by an earlier
    release with a pid file of its own is known by that file until it stops)."""

    def __init__(self, settings: Settings, programs: Sequence[str]) -> None:
        super().__init__(settings.state_dir)
        self.programs = set(programs)
        self.supervisord = Supervisord(settings, ProcessSupervisor(settings.state_dir))

    def supervised(self, name: str) -> bool:
        return name in self.programs and not self.pid_file(name).exists()

    def process(self, name: str) -> psutil.Process | None:
        return self.supervisord.process(name) if self.supervised(name) else super().process(name)

    def record(self, name: str) -> ProcessRecord | None:
        if not self.supervised(name):
            return super().record(name)
        proc = self.process(name)
        if proc is None:
            return None
        try:
            return ProcessRecord(proc.pid, proc.create_time(), proc.cmdline())
        except psutil.Error:
            return None

    def exit_code(self, name: str) -> int | None:
        return None if self.supervised(name) else super().exit_code(name)

    def left_running(self, name: str) -> psutil.Process | None:
        """The session leader of supervised program `name` still running while supervisord is not
        (it was killed): the program serves on, unsupervised. None when there is none."""
        if not self.supervised(name) or self.supervisord.running():
            return None
        for proc in self.orphans():
            try:
                argv = proc.cmdline()
            except psutil.Error:
                continue
            if str(SESSION_LEADER) in argv and argv[argv.index(str(SESSION_LEADER)) + 1 :][:1] == [name]:
                try:
                    return program_process(proc)
                except psutil.Error:
                    return None
        return None
