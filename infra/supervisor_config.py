"""supervisord's configuration for the stack: each program under its session leader
(infra/session_leader.py), its log rotated by size, the stores at a lower priority, and the
restart listener (infra/restart_listener.py); the unix socket's place."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import stat
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from definitions.files import write_private
from definitions.section import REPO_ROOT
from definitions.settings import Settings
from infra.errors import StackError
from stores.restarts import supervisor_dir

NAME = "supervisor"  # its pid file and stdout: run/supervisor.pid, logs/supervisor.log
LISTENER = "lambda-restarts"  # the event listener's name in supervisord
# supervisord starts lower priorities first and stops them last (the platform's programs have its
# default, 999): a supervisord stopped by a signal stops the platform's processes before the stores.
STORE_PRIORITY = 100
_MAX_SOCKET_PATH = 100  # AF_UNIX paths are limited to 107 bytes
SESSION_LEADER = Path(__file__).with_name("session_leader.py")


# In the environment of each platform process: the digest of the persisted settings it loaded
# (definitions.settings_store.persisted_digest). Changed settings change its supervisord entry, so
# the `up` that persists them restarts it (supervisord stops a program whose entry changed).
SETTINGS_DIGEST = "LAMBDA_SETTINGS_DIGEST"


def loaded_digest(pid: int | None) -> str | None:
    """The settings digest the process `pid` was started with; None when it has none (or is gone,
    or was started before digests were recorded)."""
    if not pid:
        return None
    try:
        return psutil.Process(pid).environ().get(SETTINGS_DIGEST)
    except psutil.Error:
        return None


def entry_digests(state_dir: Path) -> dict[str, str]:
    """The settings digest of each program's entry in the supervisord.conf written last."""

    try:
        text = config_path(state_dir).read_text(encoding="utf-8")
    except OSError:
        return {}
    out = {}
    for section in re.split(r"(?m)^(?=\[)", text):
        name = re.match(r"\[program:([^\]]+)\]", section)
        digest = re.search(rf'^environment=.*\b{SETTINGS_DIGEST}="([0-9a-f]*)"', section, re.M)
        if name and digest:
            out[name.group(1)] = digest.group(1)
    return out


@dataclass(frozen=True)
class Program:
    name: str
    command: Sequence[str]
    directory: Path
    environment: Mapping[str, str]
    stops: str = "group"  # who its stop signal reaches: "group" or "program" (infra/session_leader.py)
    # A store (Kafka, HDFS, HBase, Cassandra, a Spark cluster's daemons): supervisord starts it
    # before, and stops it after, the platform's processes that use it.
    store: bool = False


def python_executable() -> str:
    """The virtualenv's interpreter under one stable name: `python` and `python3` are the same
    program, and a configuration that named one or the other by who ran `up` would restart
    every process on each change."""
    stable = Path(sys.prefix) / "bin" / "python"
    return str(stable) if stable.exists() else sys.executable


def _stable_command(args: Sequence[str]) -> list[str]:
    args = [str(a) for a in args]
    return [python_executable(), *args[1:]] if args and args[0] == sys.executable else args


def session_command(
    name: str, args: Sequence[str], stop_timeout_s: float, cpu_nice: int = 0, stops: str = "group"
) -> list[str]:
    """The program under its session leader (infra/session_leader.py): a session, so a CPU share, of
    its own, weighed by `cpu_nice` (stack.cpu_nice); stop signals reach its group, or the program
    alone (`stops="program"`). The leader kills the program's group a second before supervisord
    would kill the leader."""
    stop_after = max(0.5, stop_timeout_s - 1)
    nice = ["--cpu-nice", str(cpu_nice)] if cpu_nice else []
    if stops != "group":
        nice += ["--stops", stops]
    return [
        python_executable(),
        "-S",
        str(SESSION_LEADER),
        name,
        "--stop-after",
        f"{stop_after:g}",
        *nice,
        "--",
        *_stable_command(args),
    ]


def program_process(proc: psutil.Process) -> psutil.Process:
    """The program a session leader runs (itself when `proc` is no session leader)."""
    try:
        cmdline = proc.cmdline()
        if len(cmdline) > 2 and cmdline[2] == str(SESSION_LEADER):
            children = proc.children()
            return children[0] if children else proc
    except psutil.Error:
        pass
    return proc


def socket_path(state_dir: Path) -> Path:
    """supervisord's unix socket: in the state dir, or, when that path is too long, in a directory of
    this user's own in the temp dir (private_socket_dir) — the one the first `up` chose, recorded in
    the state dir: a later command's TMPDIR (another shell, a cron job, a unit) may differ."""
    path = supervisor_dir(state_dir) / "supervisord.sock"
    if len(str(path)) <= _MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(str(state_dir).encode()).hexdigest()[:16]
    name = f"lambda-{os.geteuid()}-{digest}"
    try:
        chosen = Path(_socket_record(state_dir).read_text().strip())
    except (OSError, ValueError):
        chosen = None
    if (
        chosen is None
        or not chosen.is_absolute()
        or chosen.name != name
        or not chosen.parent.is_dir()  # that temp dir is gone (a reboot): the first choice again
    ):
        chosen = Path(tempfile.gettempdir()) / name
    return chosen / "supervisord.sock"


def _socket_record(state_dir: Path) -> Path:
    return supervisor_dir(state_dir) / "socket-dir"


def private_socket_dir(state_dir: Path, make: bool = True) -> Path:
    """The socket's directory (made if missing, unless `make` is False), refused unless this user
    owns it and no one else may enter it: another user who made the name first in the shared temp
    dir would otherwise hold the socket's place (supervisord could not start) or answer `lambdactl`
    in supervisord's stead. StackError when refused; without `make`, OSError (supervisord is then
    as good as not answering: the probes say so)."""
    folder = socket_path(state_dir).parent
    if folder == supervisor_dir(state_dir):
        return folder
    if make:
        folder.mkdir(mode=0o700, exist_ok=True)
        record = _socket_record(state_dir)
        if not record.exists() or record.read_text().strip() != str(folder):
            record.parent.mkdir(parents=True, exist_ok=True)
            write_private(record, f"{folder}\n")
    found = folder.lstat()  # FileNotFoundError (an OSError) when missing and not made
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid() or found.st_mode & 0o077:
        problem = (
            f"{folder} (supervisord's socket: the state directory's path is too long to hold it) is not a "
            "directory only this user may enter: remove it, or choose a shorter state_dir"
        )
        if not make:
            raise PermissionError(problem)
        raise StackError(NAME, problem)
    return folder


def config_path(state_dir: Path) -> Path:
    return supervisor_dir(state_dir) / "supervisord.conf"


def _value(text: object) -> str:
    """A value for supervisord's config file: `%` is its interpolation sign; a line break ends the value,
    and a `;` or `#` after a space starts a comment (no escape for either: refused)."""
    text = str(text)
    if "\n" in text or "\r" in text:
        raise StackError(NAME, f"cannot put a line break into supervisord.conf: {text!r}")
    if re.search(r"\s[;#]", text):  # its parser takes the rest of the line for a comment
        raise StackError(
            NAME, f"cannot put a space before ; or # (a comment to supervisord) into supervisord.conf: {text!r}"
        )
    return text.replace("%", "%%")


def _logfile(path: Path) -> str:
    """A program's log file: supervisord expands these values twice."""
    return _value(_value(path))


def _command(args: Sequence[str]) -> str:
    return _value(" ".join(shlex.quote(str(a)) for a in args))


def _environment(env: Mapping[str, str]) -> str:
    for key, value in env.items():
        if '"' in value or not key.isidentifier():
            raise StackError(NAME, f"cannot pass {key}={value!r} through supervisord's environment option")
    return _value(",".join(f'{key}="{value}"' for key, value in sorted(env.items())))


def render_config(settings: Settings, programs: Sequence[Program]) -> str:
    """supervisord.conf for these programs and the restart listener."""
    s = settings.stack
    state = settings.state_dir
    logs = state / "logs"
    sup = supervisor_dir(state)
    rotate = {"maxbytes": s.log_max_bytes, "backups": s.log_backups}
    lines = [
        "; Written by `lambdactl up` (infra/supervisor_config.py) at every start: edit the settings, not this file.",
        "[unix_http_server]",
        f"file={_value(private_socket_dir(state) / socket_path(state).name)}",
        "chmod=0700",
        "",
        "[supervisord]",
        f"logfile={_value(logs / 'supervisord.log')}",
        f"logfile_maxbytes={rotate['maxbytes']}",
        f"logfile_backups={rotate['backups']}",
        "loglevel=info",
        f"pidfile={_value(sup / 'supervisord.pid')}",
        f"childlogdir={_value(sup)}",
        "nodaemon=true",
        "silent=true",
        f"identifier=lambda-{hashlib.sha256(str(state).encode()).hexdigest()[:12]}",
        "",
        "[rpcinterface:supervisor]",
        "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
        "",
        "[supervisorctl]",
        f"serverurl=unix://{_value(socket_path(state))}",
        "",
    ]
    for program in programs:
        lines += [
            f"[program:{program.name}]",
            f"command={_command(session_command(program.name, program.command, max(1, round(s.stop_timeout_s)), s.cpu_nice.get(program.name, 0), program.stops))}",
            f"directory={_value(program.directory)}",
            f"environment={_environment(program.environment)}",
            "autostart=false",  # `lambdactl up` starts the ones it is asked for
            "autorestart=false",  # the listener restarts, with backoff and a budget
            f"startsecs={s.start_s}",
            "startretries=0",
            "stopsignal=TERM",
            f"stopwaitsecs={max(1, round(s.stop_timeout_s))}",
            "stopasgroup=true",
            "killasgroup=true",
            "redirect_stderr=true",
            f"stdout_logfile={_logfile(logs / f'{program.name}.log')}",
            f"stdout_logfile_maxbytes={rotate['maxbytes']}",
            f"stdout_logfile_backups={rotate['backups']}",
            *([f"priority={STORE_PRIORITY}"] if program.store else []),
            "",
        ]
    listener = [
        python_executable(),
        "-m",
        "infra.restart_listener",
        "--state-dir",
        str(state),
        "--programs",
        ",".join(p.name for p in programs),
        "--max-restarts",
        str(s.restart_max),
        "--window-s",
        str(s.restart_window_s),
        "--backoff-s",
        str(s.restart_backoff_s),
        "--backoff-max-s",
        str(s.restart_backoff_max_s),
    ]
    lines += [
        f"[eventlistener:{LISTENER}]",
        f"command={_command(listener)}",
        f"directory={_value(REPO_ROOT)}",
        "events=PROCESS_STATE",
        "buffer_size=1024",
        "priority=1",
        "autostart=true",
        "autorestart=true",
        "startsecs=1",
        "startretries=1000",
        "stopasgroup=true",
        "killasgroup=true",
        "stdout_logfile=NONE",
        f"stderr_logfile={_logfile(logs / 'restarts.log')}",
        f"stderr_logfile_maxbytes={rotate['maxbytes']}",
        f"stderr_logfile_backups={rotate['backups']}",
        "",
    ]
    return "\n".join(lines)
