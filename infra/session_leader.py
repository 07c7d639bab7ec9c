"""Run one supervised program as the leader of a session of its own.

supervisord starts every program in the supervisor's own session. Linux's scheduler gives each
session one share of the CPU (autogroups), so the API, the two Spark jobs and Airflow would share
one share between them while each store, started in its own session, has a whole one: under load
the platform's processes starve. supervisord's child cannot start a new session itself (it leads
its process group), so this small process forks the program into a new session and stands in for
it towards supervisord:

- stop signals it receives (TERM, INT, HUP, QUIT, USR1, USR2) go to the program's whole process group;
- it exits the way the program did: the same exit status, or killed by the same signal;
- when the program ends, what is left of its process group is killed; when this process is killed,
  the kernel kills the program (PR_SET_PDEATHSIG), and every descendant carries
  `LAMBDA_SESSION_OF=<name>:<this pid>` so the restart listener can end the rest.

Standard library only and started with `python -S`: it stays ~10 MiB while the program runs.
Usage: python -S infra/session_leader.py NAME -- COMMAND [ARGS...]
"""

from __future__ import annotations

import os
import signal
import sys

ENV = "LAMBDA_SESSION_OF"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
_PR_SET_PDEATHSIG = 1


def _child(command: list[str], leader: int) -> None:
    """In the forked child: a new session, death with the leader, then the program."""
    try:
        os.setsid()
        import ctypes  # only in the child: the leader stays small

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
        if os.getppid() != leader:  # the leader died before the line above
            os._exit(1)
        os.execvp(command[0], command)
    except BaseException as exc:  # noqa: BLE001 - nothing may return into the leader's code
        print(f"session_leader: cannot start {command[0]}: {exc}", file=sys.stderr, flush=True)
        os._exit(127)


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run(name: str, command: list[str]) -> int:
    """Start `command` in a new session and wait for it; returns its wait status."""
    leader = os.getpid()
    os.environ[ENV] = f"{name}:{leader}"
    pending: list[int] = []
    for sig in FORWARDED:  # until the child's pid is known, remember what arrived
        signal.signal(sig, lambda signum, _frame: pending.append(signum))
    pid = os.fork()
    if pid == 0:
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        _child(command, leader)
    for sig in FORWARDED:
        signal.signal(sig, lambda signum, _frame: _kill_group(pid, signum))
    for signum in pending:
        _kill_group(pid, signum)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
            continue
    _kill_group(pid, signal.SIGKILL)  # what the program left of its group (a Spark JVM, workers)
    return status


def _exit_like(status: int) -> None:
    """Exit with the program's status, or die of the signal that killed it."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        sys.exit(128 + sig)  # a signal that does not end a process by default
    sys.exit(os.waitstatus_to_exitcode(status))


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--" or not argv[0]:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        sys.exit(2)
    _exit_like(run(argv[0], argv[2:]))


if __name__ == "__main__":
    main(sys.argv[1:])
