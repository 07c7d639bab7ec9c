"""supervisord event listener: restarts the stack's processes with backoff and a restart budget.

supervisord runs each process of the stack with `autorestart=false` and `startretries=0` (see
infra/supervision.py): every exit, early or late, reaches this listener as a PROCESS_STATE event.
For each one it logs why (exit status or signal, how long the process ran, the last lines of its
log), ends what is left of the process's group, and either schedules a restart (infra/restarts.py
Budget: backoff doubling per recent restart) or, when the budget is spent, gives the process up.
A process started by hand (`lambdactl up`, supervisorctl) gets a fresh budget.

Run by supervisord as `python -m infra.restart_listener --state-dir … --programs a,b …`; its stdout
is the event protocol, its stderr the log `<state_dir>/logs/restarts.log`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import select
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any, BinaryIO
from xmlrpc.client import Fault

import psutil

from definitions.logs import configure
from infra.process import MAX_TAIL_READ_BYTES, short_tail, tail_file
from infra.restarts import Budget
from infra.supervisor_config import program_process
from stores.restarts import new_entry, read_status, write_status

log = logging.getLogger("lambda.restarts")

# A program that starts within this long of the listener asking for it is its restart (a listener
# that died in between left the time it asked in the status file).
ASKED_WITHIN_S = 60.0
_EXITED_LINE = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ \w+ exited: %s \((.*?); (?:not )?expected\)$"


def program_of(leader_pid: int) -> tuple[int, float] | None:
    """(pid, start time) of the program a session leader runs, or None."""
    with contextlib.suppress(psutil.Error):
        program = program_process(psutil.Process(leader_pid))
        if program.pid != leader_pid:
            return program.pid, program.create_time()
    return None


def session_members(session: int, started: float | None = None) -> list[psutil.Process]:
    """The processes of session `session` (a program's pid: it leads its own session). When a
    process with that pid runs but started at another time than `started`, the pid was reused
    (the old session is empty: a session id is not reused while it has members): none."""
    with contextlib.suppress(psutil.Error):
        if started is not None and abs(psutil.Process(session).create_time() - started) > 0.01:
            return []
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(OSError, psutil.Error):
            if proc.pid != session and os.getsid(proc.pid) == session:
                found.append(proc)
    with contextlib.suppress(OSError, psutil.Error):
        if os.getsid(session) == session:
            found.insert(0, psutil.Process(session))
    alive = []
    for proc in found:  # a zombie is dead already (its parent has not reaped it)
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
    return alive


def exit_reason(supervisord_log: Path, name: str, now: float, max_age_s: float = 30.0) -> str | None:
    """What supervisord logged about the latest exit of `name` ("terminated by SIGKILL", "exit status 2"),
    if it logged one within `max_age_s` of `now`."""
    pattern = re.compile(_EXITED_LINE % re.escape(name))
    for line in reversed(tail_file(supervisord_log, 400).splitlines()):
        match = pattern.match(line)
        if match:
            logged = time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"))
            return match.group(2) if abs(now - logged) <= max_age_s else None
    return None


class Listener:
    """The restart policy, driven by supervisord's events; `rpc` is supervisord's XML-RPC proxy."""

    def __init__(
        self,
        state_dir: Path,
        budget: Budget,
        programs: Iterable[str],
        rpc: Any,
        log_lines: int = 20,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state_dir = state_dir
        self.log_dir = state_dir / "logs"
        self.budget = budget
        self.programs = set(programs)
        self.rpc = rpc
        # Makes the proxy again after a failed call: the client keeps one connection, and once a call
        # failed on it (supervisord closed it while idle) it refuses every later call on it.
        self.rpc_factory: Callable[[], Any] | None = None
        self.log_lines = log_lines
        self.clock = clock
        self.expecting: set[str] = set()  # restarts this listener asked for, their STARTING not seen yet
        self.doc = self._load()

    def _load(self) -> dict[str, Any]:
        doc = read_status(self.state_dir)
        try:
            pid = self.rpc.supervisor.getPID()
        except Exception:  # supervisord not answering: keep what the file says
            pid = doc.get("supervisord_pid")
        if doc.get("supervisord_pid") != pid:  # a new supervisord: a new history
            doc = {"processes": {}}
        doc["supervisord_pid"] = pid
        doc["budget"] = asdict(self.budget)
        for name in self.programs:
            doc["processes"].setdefault(name, new_entry())
        for name in list(doc["processes"]):
            if name not in self.programs:
                del doc["processes"][name]
        return doc

    def save(self) -> None:
        """Write the restart record for `lambdactl status` and a successor listener. A write that
        fails (a full disk) keeps it in memory and the restarts going: it killed the listener, and
        supervisord, past its start retries, left every process of the platform unrestarted."""
        self.doc["updated_at"] = self.clock()
        try:
            write_status(self.state_dir, self.doc)
        except OSError as exc:
            log.warning("the restart record could not be written (%s); restarts go on", exc)

    def entry(self, name: str) -> dict[str, Any]:
        return self.doc["processes"].setdefault(name, new_entry())

    # --- events ------------------------------------------------------------------------------

    def handle(self, eventname: str, payload: str) -> None:
        if not eventname.startswith("PROCESS_STATE_"):
            return
        fields = dict(token.split(":", 1) for token in payload.split() if ":" in token)
        name = fields.get("processname")
        if name not in self.programs:
            return
        state = eventname.removeprefix("PROCESS_STATE_")
        entry, now = self.entry(name), self.clock()
        if state == "STARTING":
            entry["started_at"] = now
            # Asked by this listener, or by one that died before seeing the start (the file says so).
            asked = entry.pop("restart_asked_at", None)
            if name in self.expecting or (asked is not None and 0 <= now - asked <= ASKED_WITHIN_S):
                self.expecting.discard(name)
            else:  # started by hand (`lambdactl up`, supervisorctl): a fresh budget
                if entry.get("restarts") or entry.get("gave_up_at"):
                    log.info("%s started by hand: its restart budget starts afresh (%s)", name, self.budget.describe())
                entry.update(restarts=0, recent=[], gave_up_at=None, next_restart_at=None)
        elif state == "RUNNING":
            entry["pid"] = int(fields.get("pid", 0)) or None
            entry["session"] = program_of(entry["pid"]) if entry["pid"] else None  # [pid, start time]
        elif state == "BACKOFF":  # exited before `startsecs`; FATAL follows (startretries=0)
            self._exited(name, entry, None, now)
        elif state == "EXITED":
            self._exited(name, entry, int(fields.get("pid", 0)) or None, now)
            self._decide(name, entry, now)
        elif state == "FATAL":
            self._decide(name, entry, now)
        elif state in ("STOPPING", "STOPPED") and entry.get("next_restart_at"):
            entry["next_restart_at"] = None  # stopped on purpose: no restart pending any more
        if state == "STOPPED":
            self._end_session(name, entry)
        entry["state"] = (
            "restarting"
            if entry.get("next_restart_at")
            else "gave up"
            if entry.get("gave_up_at") and state in ("EXITED", "FATAL")
            else state
        )
        entry["since"] = now
        self.save()

    def _exited(self, name: str, entry: dict[str, Any], pid: int | None, now: float) -> None:
        reason = exit_reason(self.log_dir / "supervisord.log", name, now) or self._rpc_reason(name)
        ran = now - entry["started_at"] if entry.get("started_at") else None
        tail = short_tail(tail_file(self.log_dir / f"{name}.log", self.log_lines, max_bytes=MAX_TAIL_READ_BYTES))
        entry["last_exit"] = {
            "at": now,
            "reason": reason,
            "uptime_s": None if ran is None else round(ran, 1),
            "log_tail": tail,
        }
        entry["pid"] = None
        if pid:
            self._end_group(name, pid)

    def _reconnect(self) -> None:
        """A new proxy for the next call (see rpc_factory)."""
        if self.rpc_factory is not None:
            try:
                self.rpc = self.rpc_factory()
            except Exception as exc:  # the next failure tries again
                log.warning("could not make a new connection to supervisord: %s: %s", type(exc).__name__, exc)

    def _rpc_reason(self, name: str) -> str:
        try:
            info = self.rpc.supervisor.getProcessInfo(name)
        except Fault:
            return "exited (supervisord did not say how)"
        except Exception:
            self._reconnect()
            return "exited (supervisord did not say how)"
        if info.get("spawnerr"):
            return str(info["spawnerr"])
        return f"exit status {info.get('exitstatus')}"

    def _end_group(self, name: str, pid: int) -> None:
        """What the exited process left of its group (a Spark driver's JVM, Airflow's workers) goes too,
        and what its program's session left when the session leader itself was killed."""
        try:
            os.killpg(pid, signal.SIGKILL)
            log.warning("%s: killed what was left of its process group %d", name, pid)
        except (ProcessLookupError, PermissionError):
            pass
        self._end_session(name, self.entry(name))

    def _end_session(self, name: str, entry: dict[str, Any]) -> None:
        """What the program's session still holds once its leader is gone (the leader cleans up
        after the program itself, unless it was killed): killed, until none is left."""
        session = entry.pop("session", None)
        if not session:
            return
        pid, started = session
        for _ in range(5):
            left = session_members(pid, started)
            if not left:
                return
            for proc in left:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            log.warning("%s: killed %d process(es) its session left: %s", name, len(left), [p.pid for p in left])
            psutil.wait_procs(left, timeout=5)

    def _decide(self, name: str, entry: dict[str, Any], now: float) -> None:
        last = entry.get("last_exit") or {}
        ran = f" after {last['uptime_s']:.0f}s" if last.get("uptime_s") is not None else ""
        tail = "\n".join(f"    {line}" for line in last.get("log_tail", [])) or "    (its log is empty)"
        delay = self.budget.delay(entry.get("recent", []), now)
        if delay is None:
            entry.update(gave_up_at=now, next_restart_at=None)
            log.error(
                "%s exited (%s)%s: restart loop, giving up (%s; `lambdactl up` tries again). "
                "Last lines of its log:\n%s",
                name,
                last.get("reason"),
                ran,
                self.budget.describe(),
                tail,
            )
            return
        entry["recent"] = [*self.budget.recent(entry.get("recent", []), now), now]
        entry["restarts"] = entry.get("restarts", 0) + 1
        entry["restarts_total"] = entry.get("restarts_total", 0) + 1
        entry["next_restart_at"] = now + delay
        log.warning(
            "%s exited (%s)%s: restarting in %.0fs (restart %d, %s). Last lines of its log:\n%s",
            name,
            last.get("reason"),
            ran,
            delay,
            len(entry["recent"]),
            self.budget.describe(),
            tail,
        )

    # --- restarts ----------------------------------------------------------------------------

    def next_due(self) -> float | None:
        due = [e["next_restart_at"] for e in self.doc["processes"].values() if e.get("next_restart_at")]
        return min(due) if due else None

    def run_due(self) -> None:
        now = self.clock()
        changed = False
        for name, entry in self.doc["processes"].items():
            when = entry.get("next_restart_at")
            if not when or when > now:
                continue
            self.expecting.add(name)
            entry["restart_asked_at"] = now
            self.save()  # before asking: a listener that dies meanwhile leaves its successor the word
            try:
                self.rpc.supervisor.startProcess(name, False)
                log.info("%s: restarted", name)
                entry.update(next_restart_at=None, last_restart_at=now, state="STARTING", since=now)
            except Fault as fault:  # e.g. already started by someone else: nothing to do
                self.expecting.discard(name)
                entry.pop("restart_asked_at", None)
                log.info("%s: not restarted: %s", name, fault.faultString)
                entry["next_restart_at"] = None
            except Exception as exc:  # supervisord busy or going away: try again shortly
                self.expecting.discard(name)
                entry.pop("restart_asked_at", None)
                log.warning("%s: restart failed (%s: %s); trying again in 1s", name, type(exc).__name__, exc)
                entry["next_restart_at"] = now + 1.0
                self._reconnect()
            changed = True
        if changed:
            self.save()

    def reconcile(self) -> None:
        """On start: a process that exited while no listener ran is decided on now."""
        try:
            infos = self.rpc.supervisor.getAllProcessInfo()
        except Exception:
            self._reconnect()
            return
        now = self.clock()
        for info in infos:
            name, state = info["name"], info["statename"]
            if name not in self.programs:
                continue
            entry = self.entry(name)
            if state in ("EXITED", "FATAL") and not entry.get("next_restart_at") and not entry.get("gave_up_at"):
                self._exited(name, entry, None, now)
                self._decide(name, entry, now)
                entry["state"] = "restarting" if entry.get("next_restart_at") else "gave up"
            elif state in ("RUNNING", "STARTING"):
                entry.update(state=state, pid=info.get("pid") or None)
        self.save()

    def serve(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        """The event listener protocol, waking up in between for the restarts that come due."""
        self.reconcile()
        while True:
            stdout.write(b"READY\n")
            stdout.flush()
            while True:
                due = self.next_due()
                timeout = None if due is None else max(0.0, due - self.clock())
                ready, _, _ = select.select([stdin], [], [], timeout)
                if ready:
                    break
                self.run_due()
            line = stdin.readline()
            if not line:
                return  # supervisord went away
            headers = dict(token.split(":", 1) for token in line.decode().split() if ":" in token)
            payload = stdin.read(int(headers.get("len", 0))).decode(errors="replace")
            try:
                self.handle(headers.get("eventname", ""), payload)
            except Exception:  # one bad event must not take the restarts down
                log.exception("could not handle %s: %s", headers.get("eventname"), payload)
            stdout.write(b"RESULT 2\nOK")
            stdout.flush()
            self.run_due()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="restart_listener")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--programs", required=True, help="comma-separated supervisord program names")
    parser.add_argument("--max-restarts", type=int, required=True)
    parser.add_argument("--window-s", type=float, required=True)
    parser.add_argument("--backoff-s", type=float, required=True)
    parser.add_argument("--backoff-max-s", type=float, required=True)
    parser.add_argument("--log-lines", type=int, default=20)
    args = parser.parse_args(argv)
    configure("restart-listener")
    from supervisor import childutils

    budget = Budget(args.max_restarts, args.window_s, args.backoff_s, args.backoff_max_s)
    listener = Listener(
        args.state_dir,
        budget,
        [p for p in args.programs.split(",") if p],
        childutils.getRPCInterface(os.environ),
        args.log_lines,
    )
    listener.rpc_factory = lambda: childutils.getRPCInterface(os.environ)
    log.info(
        "watching %s: %s, backoff %.0fs doubling to %.0fs",
        ", ".join(sorted(listener.programs)),
        budget.describe(),
        budget.backoff_s,
        budget.backoff_max_s,
    )
    listener.serve(sys.stdin.buffer, sys.stdout.buffer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
