"""Running a service as a local process group, with a pid file and a log file.

Each process is started in a new session (its own process group) and tagged with the state
directory in its environment, so `stop` can end the whole group and `orphans` can find
anything a lost pid file would otherwise hide.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from definitions.files import start_ticks, write_private
from infra.errors import StackError

log = logging.getLogger(__name__)

STATE_TAG = "LAMBDA_STACK_STATE_DIR"


@dataclass(frozen=True)
class ProcessRecord:
    pid: int
    create_time: float
    command: list[str]
    start_ticks: int | None = None  # start_ticks(pid) when recorded; None: a record of an earlier release


class ProcessSupervisor:
    """Pid files, log files and signals for the processes of one state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.run_dir = state_dir / "run"
        self.log_dir = state_dir / "logs"

    def pid_file(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def start(
        self, name: str, command: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None
    ) -> ProcessRecord:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        cwd.mkdir(parents=True, exist_ok=True)
        full_env = dict(os.environ if env is None else env)
        full_env[STATE_TAG] = str(self.state_dir)
        log_path = self.log_file(name)
        with open(log_path, "ab") as log_handle:
            log_handle.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting {name}\n".encode())
            log_handle.flush()
            proc = subprocess.Popen(
                list(command),
                cwd=cwd,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=log_handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        record = ProcessRecord(proc.pid, psutil.Process(proc.pid).create_time(), list(command), start_ticks(proc.pid))
        try:  # whole or not at all (definitions.files); unrecorded, the process would run on unseen
            write_private(self.pid_file(name), json.dumps(record.__dict__))
        except OSError as exc:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait(10)
            raise StackError(name, f"could not record its pid in {self.pid_file(name)} ({exc}): stopped it") from None
        log.info("started %s as pid %d", name, proc.pid)
        return record

    def record(self, name: str) -> ProcessRecord | None:
        path = self.pid_file(name)
        try:
            data = json.loads(path.read_text())
            ticks, pid = data.get("start_ticks"), data["pid"]
            if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:  # psutil raises on it: no process
                return None
            return ProcessRecord(
                pid,
                float(data["create_time"]),
                list(data["command"]),
                None if ticks is None else int(ticks),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def process(self, name: str) -> psutil.Process | None:
        """The live process recorded for `name`, or None (a reused pid does not count)."""
        rec = self.record(name)
        if rec is None:
            return None
        try:
            proc = psutil.Process(rec.pid)
            ticks = start_ticks(rec.pid) if rec.start_ticks is not None else None
            same = ticks == rec.start_ticks if ticks is not None else abs(proc.create_time() - rec.create_time) <= 1
            if not same or proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return proc
        except psutil.Error:
            return None

    def exit_code(self, name: str) -> int | None:
        """Reap a child that exited; its code, or None when it is not our child or still runs."""
        rec = self.record(name)
        if rec is None:
            return None
        try:
            pid, status = os.waitpid(rec.pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if pid == 0:
            return None
        return os.waitstatus_to_exitcode(status)

    def tree(self, name: str) -> list[psutil.Process]:
        proc = self.process(name)
        if proc is None:
            return []
        try:
            return [proc, *proc.children(recursive=True)]
        except psutil.Error:
            return [proc]

    def rss_bytes(self, name: str) -> int:
        total = 0
        for proc in self.tree(name):
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                pass
        return total

    def stop(self, name: str, timeout_s: float) -> bool:
        """End the process group of `name`: SIGTERM, then SIGKILL after `timeout_s`. True if it ran."""
        proc = self.process(name)
        ran = proc is not None
        if proc is not None:
            members = self.tree(name)
            _signal_group(proc.pid, signal.SIGTERM)
            _, alive = psutil.wait_procs(members, timeout=timeout_s)
            if alive:
                log.warning("%s did not stop within %.0fs; killing it", name, timeout_s)
                _signal_group(proc.pid, signal.SIGKILL)
                for member in alive:
                    _kill(member)
                psutil.wait_procs(alive, timeout=10)
            self.exit_code(name)
        self.pid_file(name).unlink(missing_ok=True)
        return ran

    def orphans(self) -> list[psutil.Process]:
        """Processes tagged with this state directory that no pid file accounts for."""
        known = {p.pid for name in self.names() for p in self.tree(name)}
        found = []
        for proc in psutil.process_iter(["pid"]):
            if proc.pid in known or proc.pid == os.getpid():
                continue
            try:
                if proc.environ().get(STATE_TAG) == str(self.state_dir):
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    def orphan_programs(self) -> set[str]:
        """The names of the supervisord programs with orphans left running."""
        return {name for name in map(program_of, self.orphans()) if name}

    def end_orphans(self, timeout_s: float, last: Collection[str] = (), only: Collection[str] | None = None) -> int:
        """End what orphans() finds; how many. Each program of a supervisor that died runs under a
        wrapper (infra/session_leader.py), which gets SIGTERM and passes it on as the supervisor's
        stop would (to the program's group, or the program alone), then ends the group itself. A
        session with no wrapper left gets SIGTERM through its leader's group; a process whose session
        has no leader left gets it alone. What still runs after `timeout_s` gets SIGKILL. The
        sessions of the programs named in `last` (the stores) are ended once the others are; with
        `only`, just the orphans of the programs it names."""
        orphans = self.orphans()
        if only is not None:
            theirs = _of_programs(orphans, set(only))
            orphans = [p for p in orphans if p.pid in theirs]
        later = _of_programs(orphans, set(last))
        first = [p for p in orphans if p.pid not in later]
        return self._end(first, timeout_s) + self._end([p for p in orphans if p.pid in later], timeout_s)

    def _end(self, orphans: list[psutil.Process], timeout_s: float) -> int:
        if not orphans:
            return 0
        wrapper_path = str(WRAPPER)
        wrappers = {proc.pid for proc in orphans if _cmdline(proc)[2:3] == [wrapper_path]}
        wrapped: set[int] = set()  # the programs the wrappers run: each leads its session and group
        groups: set[int] = set()  # the groups of session leaders no wrapper runs: signalled as a group
        for proc in orphans:
            try:
                if proc.ppid() in wrappers:
                    wrapped.add(proc.pid)
                elif proc.pid not in wrappers and os.getsid(proc.pid) == proc.pid:
                    groups.add(proc.pid)
            except (OSError, psutil.Error):
                continue
        for proc in orphans:
            try:
                group = os.getpgid(proc.pid)
                if proc.pid in wrappers:
                    proc.terminate()  # it stops its program as supervisord's stop would
                elif group in wrapped:
                    continue  # in the program's group: its wrapper passes the stop on
                elif proc.pid in groups:
                    _signal_group(proc.pid, signal.SIGTERM)
                elif group in groups:
                    continue  # signalled with its group
                else:  # a group of its own in a program's session, or a session whose leader is gone
                    proc.terminate()
                log.warning("stopping orphan pid %d (%s)", proc.pid, " ".join(_cmdline(proc))[:120])
            except (OSError, psutil.Error):
                continue
        _, alive = psutil.wait_procs(orphans, timeout=timeout_s)
        for proc in alive:
            log.warning("killing orphan pid %d (%s)", proc.pid, " ".join(_cmdline(proc))[:120])
            _kill(proc)
        psutil.wait_procs(alive, timeout=10)
        return len(orphans)

    def names(self) -> list[str]:
        if not self.run_dir.is_dir():
            return []
        return sorted(p.stem for p in self.run_dir.glob("*.pid"))

    def tail(self, name: str, lines: int = 40) -> str:
        return tail_file(self.log_file(name), lines)


WRAPPER = Path(__file__).with_name("session_leader.py")


# The name supervisord gives each program in its environment, which everything it starts inherits.
PROGRAM_NAME = "SUPERVISOR_PROCESS_NAME"


def program_of(proc: psutil.Process) -> str | None:
    """The supervisord program `proc` belongs to (its wrapper, the program, anything they started,
    however it regrouped), or None."""
    try:
        return proc.environ().get(PROGRAM_NAME)
    except psutil.Error:
        return None


def _of_programs(procs: list[psutil.Process], names: set[str]) -> set[int]:
    """The pids among `procs` that belong to the programs named in `names`."""
    return {p.pid for p in procs if program_of(p) in names}


# What `tail_file` reads at most from the end of a log (a log of very long lines shows fewer).
MAX_TAIL_BYTES = 16 * 1024 * 1024


def tail_file(path: Path, lines: int = 40, max_bytes: int = MAX_TAIL_BYTES) -> str:
    """The last `lines` lines of a log, read back from its end in blocks; when its last `max_bytes`
    hold fewer, those, after a line saying so."""
    if lines <= 0:
        return ""
    try:
        with open(path, "rb") as handle:
            size = start = handle.seek(0, os.SEEK_END)
            blocks: list[bytes] = []
            ends = 0  # line ends in the blocks read
            while start > 0 and ends <= lines and size - start < max_bytes:
                step = min(64 * 1024, start, max_bytes - (size - start))
                start -= step
                handle.seek(start)
                blocks.append(handle.read(step))
                ends += blocks[-1].count(b"\n")
            whole = start == 0
            if not whole:  # a line begins where the read began only if the byte before ends one
                handle.seek(start - 1)
                whole = handle.read(1) == b"\n"
    except OSError:
        return ""
    shown = b"".join(reversed(blocks)).decode("utf-8", errors="replace").splitlines()
    if not whole:
        shown = shown[1:]  # the first is cut where the read began
    shown = shown[-lines:]
    if start > 0 and len(shown) < lines:
        shown.insert(0, f"(the last {max_bytes:,} bytes of {path.name} hold only the {len(shown):,} lines below)")
    return "\n".join(shown)


def follow_command(path: Path, lines: int) -> list[str]:
    """The command that prints the last `lines` of a log, then what is written to it: coreutils'
    `tail -F` follows the file by name, so past supervisord's rotation (the file renamed to `.1`, a
    new one opened), where reading on from the open file showed nothing more, for ever."""
    return ["tail", "-n", str(max(0, lines)), "-F", "--", str(path)]


def port_owner(host: str, port: int) -> str | None:
    """Who holds a listening TCP port, described for a person; None when the port is free."""
    try:  # IPv4 or IPv6, as the host resolves ("[::1]" as "::1")
        socket.create_connection((host.removeprefix("[").removesuffix("]"), port), timeout=0.5).close()
    except OSError:  # refused, unanswered or a host that does not resolve: nothing listens there
        return None
    for conn in _listening(port):
        if conn.pid:
            try:
                proc = psutil.Process(conn.pid)
                return f"pid {conn.pid} ({' '.join(_cmdline(proc))[:100]})"
            except psutil.Error:
                pass
    return "another process"


def ports_in_use(host: str, ports: Iterable[int]) -> dict[int, str]:
    taken = {}
    for port in ports:
        owner = port_owner(host, port)
        if owner is not None:
            taken[port] = owner
    return taken


def _listening(port: int) -> list:
    try:
        return [
            c
            for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
        ]
    except psutil.Error:
        return []


_PR_SET_PDEATHSIG = 1  # prctl(2)


def dies_with_this_thread() -> Callable[[], None]:
    """A subprocess preexec_fn: the child gets SIGKILL when the thread that started it ends. Its
    parent killed (a task's timeout, kill -9) left it running with no time limit, the limit having
    lived in the parent; a child whose parent died before the signal was set does not run."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: loading a library in a forked child is not safe
    parent = os.getpid()

    def setup() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return setup


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _kill(proc: psutil.Process) -> None:
    try:
        proc.kill()
    except psutil.Error:
        pass


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return ["?"]


# What a restart record keeps of a program's last log lines: the record is rewritten at every event
# and read by every `status` and /health, and a log's lines can be of any length.
MAX_TAIL_LINE_CHARS = 500
MAX_TAIL_TOTAL_CHARS = 8 * 1024
MAX_TAIL_READ_BYTES = 256 * 1024


def short_tail(text: str) -> list[str]:
    """The lines of `text` (a log's tail), each cut to MAX_TAIL_LINE_CHARS (an ellipsis says where),
    the last of them that fit MAX_TAIL_TOTAL_CHARS in all."""
    kept: list[str] = []
    total = 0
    for line in reversed(text.splitlines()):
        line = line if len(line) <= MAX_TAIL_LINE_CHARS else line[:MAX_TAIL_LINE_CHARS] + "…"
        total += len(line)
        if total > MAX_TAIL_TOTAL_CHARS:
            break
        kept.append(line)
    return kept[::-1]
