"""Run one supervised program as the leader of a session of its own.

supervisord starts every program in the supervisor's own session. Linux's scheduler gives each
session one share of the CPU (autogroups), so the API, the two Spark jobs and Airflow would share
one share between them while each store, started in its own session, has a whole one: under load
the platform's processes starve. supervisord's child cannot start a new session itself (it leads
its process group), so this small process forks the program into a new session and stands in for
it towards supervisord:

- stop signals it receives (TERM, INT, HUP, QUIT; USR1, USR2 pass too) go to the program's whole
  process group, or with `--stops program` to the program alone: a PySpark driver stops its
  streaming queries through its JVM, a child in its group that must outlive the signal; the
  program ends the rest itself, and what it leaves is ended as below. `--stop-after S` seconds
  after the first stop signal the group is killed (set below supervisord's stopwaitsecs, so
  supervisord never has to kill this process and leave the program's children behind);
- signals that arrive while the program is being started are held (blocked) and delivered to it;
- it exits the way the program did: the same exit status, or killed by the same signal;
- when the program ends, what is left of its process group gets TERM, then KILL after 2 s;
- when this process is killed, the kernel kills the program (PR_SET_PDEATHSIG); the restart
  listener ends the rest of the program's session (infra/restart_listener.py);
- `--cpu-nice N` (0..19) makes the program's session yield the CPU: its autogroup's nice value
  (/proc/self/autogroup, the session's weight against the other sessions) and the program's own
  nice value (what counts where the kernel has no autogroups) are N.

Standard library only and started with `python -S`: it stays ~10 MiB while the program runs.
Usage: python -S infra/session_leader.py NAME [--stop-after SECONDS] [--cpu-nice N] [--stops group|program] -- COMMAND [ARGS...]
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import NoReturn

STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
FORWARDED = (*STOPS, signal.SIGUSR1, signal.SIGUSR2)
LEFTOVER_GRACE_S = 2.0
_PR_SET_PDEATHSIG = 1


def _yield_cpu(nice: int) -> None:
    """The new session's CPU weight (see the module's docstring); raising a nice value needs no privilege."""
    if nice == 0:
        return
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    try:
        with open("/proc/self/autogroup", "w") as autogroup:
            autogroup.write(str(nice))
    except OSError:  # a kernel without autogroups: the process's own nice value is what counts
        pass


def _child(command: list[str], leader: int, nice: int = 0) -> None:
    """In the forked child (forwarded signals blocked): a new session, death with the leader, the
    default signal actions, then the signals unblocked — one that arrived meanwhile ends it — and exec."""
    try:
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        os.setsid()
        _yield_cpu(nice)
        import ctypes  # only in the child: the leader stays small

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
        if os.getppid() != leader:  # the leader died before the line above
            os._exit(1)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        os.execvp(command[0], command)
    except BaseException as exc:  # noqa: BLE001 - nothing may return into the leader's code
        print(f"session_leader: cannot start {command[0]}: {exc}", file=sys.stderr, flush=True)
        os._exit(127)


def _signal_group(pid: int, sig: int) -> None:
    """`sig` to the program's group; to the program alone while it has no group yet (before its
    setsid the signal stays pending, blocked, and ends it when it unblocks)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    except PermissionError:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _end_leftovers(pgid: int) -> None:
    """What the program left of its group (a Spark JVM, workers): TERM, then KILL after a grace."""
    if not _group_alive(pgid):
        return
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while time.monotonic() < deadline and _group_alive(pgid):
        time.sleep(0.05)
    if _group_alive(pgid):
        _signal_group(pgid, signal.SIGKILL)


def _signal_program(pid: int, sig: int) -> None:
    """`sig` to the program alone (before its setsid the signal stays pending, as for the group)."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run(command: list[str], stop_after_s: float | None = None, nice: int = 0, group_stops: bool = True) -> int:
    """Start `command` in a new session and wait for it; returns its wait status. Forwarded signals
    go to the program's group, or to the program alone when `group_stops` is false."""
    leader = os.getpid()
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    pid = os.fork()
    if pid == 0:
        _child(command, leader, nice)
    stopping = False
    send = _signal_group if group_stops else _signal_program

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        send(pid, signum)
        if signum in STOPS and not stopping and stop_after_s is not None:
            stopping = True
            signal.setitimer(signal.ITIMER_REAL, stop_after_s)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    signal.signal(signal.SIGALRM, lambda _s, _f: _signal_group(pid, signal.SIGKILL))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)  # what arrived meanwhile is forwarded now
    # Wait without reaping: while the program is a zombie its pid stays its group's id.
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    signal.setitimer(signal.ITIMER_REAL, 0)
    _end_leftovers(pid)
    _, status = os.waitpid(pid, 0)
    return status


def _exit_like(status: int) -> None:
    """Exit with the program's status, or die of the signal that killed it (without a core dump)."""
    if os.WIFSIGNALED(status):
        import resource

        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        sys.exit(128 + sig)  # a signal that does not end a process by default
    sys.exit(os.waitstatus_to_exitcode(status))


def parse(argv: list[str]) -> tuple[str, float | None, int, bool, list[str]]:
    """NAME [--stop-after S] [--cpu-nice N] [--stops group|program] -- COMMAND...: the name, the
    stop-after, the nice value, whether stop signals go to the whole group, the command;
    SystemExit(2) on anything else."""

    def refuse() -> NoReturn:
        print((__doc__ or "").strip().splitlines()[-1], file=sys.stderr)
        sys.exit(2)

    if "--" not in argv:
        refuse()
    split = argv.index("--")
    head, command = argv[:split], argv[split + 1 :]
    if len(head) % 2 != 1 or not head[0] or not command:
        refuse()
    options = dict(zip(head[1::2], head[2::2], strict=True))
    if set(options) - {"--stop-after", "--cpu-nice", "--stops"} or options.get("--stops", "group") not in (
        "group",
        "program",
    ):
        refuse()
    stop_after: float | None = None
    nice = 0
    try:
        if "--stop-after" in options:
            stop_after = float(options["--stop-after"])
        nice = int(options.get("--cpu-nice", "0"))
    except ValueError:
        refuse()
    if (stop_after is not None and not stop_after > 0) or not 0 <= nice <= 19:
        refuse()
    return head[0], stop_after, nice, options.get("--stops", "group") == "group", command


def main(argv: list[str]) -> None:
    _name, stop_after, nice, group_stops, command = parse(argv)
    _exit_like(run(command, stop_after, nice, group_stops))


if __name__ == "__main__":
    main(sys.argv[1:])
