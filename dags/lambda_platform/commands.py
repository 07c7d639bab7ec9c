"""Running the platform's command line from an Airflow task, and naming why a task failed.

Airflow runs in its own virtualenv without the platform's packages: every task calls the platform's
command line (LAMBDA_PLATFORM_BIN/lambdactl) and reads the JSON it prints. When a task fails, its
cause is the task's `failure_cause` XCom, which the UI shows in the task's XCom tab without the log.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterable
from typing import Any

from airflow.exceptions import AirflowFailException
from airflow.sdk import get_current_context

# Why a task failed: an XCom the Airflow UI shows.
FAILURE_CAUSE_KEY = "failure_cause"


def context() -> Any:
    """The running task's context (a call, looked up at each use: one place to stand in for it)."""
    return get_current_context()


class LambdactlError(RuntimeError):
    def __init__(self, args: list[str], code: int, stderr: str) -> None:
        tail = "\n".join(stderr.strip().splitlines()[-25:])
        super().__init__(f"lambdactl {' '.join(args)} exited {code}:\n{tail}")
        self.code = code


REFUSED = 2  # lambdactl's refusal: the same command would meet it again


class LambdactlRefused(LambdactlError, AirflowFailException):
    """A refusal (exit 2: behind what serves, the pointer moved, the grace over, an unknown view):
    the task fails at once, its retries being for failures that may pass (a store that blinked)."""


# What a command leaves its task, of the task's execution_timeout, to report why it stopped: a
# minute, or a quarter of a shorter limit.
TIMEOUT_MARGIN_S = 60


def command_timeout_s() -> float | None:
    """How long the running task's command may take: the task's own execution_timeout (a batch over
    a large master dataset may take hours), less the margin to name the cause; None without one."""
    limit = context()["ti"].task.execution_timeout
    if limit is None:
        return None
    total = limit.total_seconds()
    return max(total - min(TIMEOUT_MARGIN_S, total / 4), 1.0)


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when the thread that started it dies


# Looked up once, in the task's process: not in the forked child, where loading a library is not
# safe while other threads of the parent held its locks.
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl


def _end_with_the_task(parent: int) -> Callable[[], None]:
    """For the command's process, before it runs: SIGTERM when the task's process dies. Airflow ends a
    task ("mark failed", "clear", a missed heartbeat) with SIGTERM then SIGKILL to the task's own
    process only, and a `@task` has no on_kill: the command ran on (a batch's Spark driver beside the
    retry's, a swap moving the pointer after the UI said failed). A task that died between the fork
    and the signal's setting sends none: the command then does not run at all."""

    def setup() -> None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return setup


def _end_with_the_supervisor() -> None:
    """For the task's own process: SIGKILL when the process that started it dies. Airflow's executor
    runs a supervisor that forks the task's process; one killed (kill -9, the OOM killer) left the
    task orphaned and running, and its command with it (a batch's Spark driver beside the retry the
    scheduler starts once the heartbeats stop). Airflow's handler of SIGTERM in the task's process
    only calls on_kill, which a `@task` does not have: SIGKILL ends it, and its command gets the
    SIGTERM _end_with_the_task asked for. A supervisor gone before the signal was asked for leaves
    the task a child of init (1), and it ends without running the command; one gone before the task
    got here, under a subreaper (a process that adopts orphans, as systemd's user manager does),
    is not noticed."""
    parent = os.getppid()
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent == 1 or os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


def say_cause(cause: str) -> None:
    context()["ti"].xcom_push(key=FAILURE_CAUSE_KEY, value=cause[:2_000])


def lambdactl(*args: str, expected: tuple[int, ...] = (), refusal_retried: bool = False) -> dict:
    """Run one lambdactl command; the JSON object of its last stdout line (empty if none). When it
    fails, its last words are also the task's `failure_cause` XCom: the UI shows it in the task's
    XCom tab, without opening the log; exit codes in `expected` (the caller's answer, not a failure)
    leave no cause. A refusal (exit 2) fails the task at once, unless `refusal_retried` (a command
    whose refusal may pass: another compaction holding its lease)."""
    command = f"lambdactl {' '.join(args)}"
    if len(command) > 200:  # many views named: the cause's 2,000 characters cut off the reason after it
        command = command[:200] + "…"
    if not os.environ.get("LAMBDA_PLATFORM_BIN"):  # else whichever `lambdactl` the PATH holds would run
        cause = f"{command} not run: LAMBDA_PLATFORM_BIN is not set (Airflow was not started by `lambdactl up`)"
        say_cause(cause)
        raise LambdactlRefused(list(args)[:1], -1, cause)
    binary = os.path.join(os.environ["LAMBDA_PLATFORM_BIN"], "lambdactl")
    timeout_s = command_timeout_s()
    _end_with_the_supervisor()
    try:
        done = subprocess.run(
            [binary, *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            preexec_fn=_end_with_the_task(os.getpid()),
        )
    except OSError as exc:  # no such program, or arguments too long for the system (a run's conf)
        say_cause(f"{command} could not be started: {exc.strerror or exc}")
        raise LambdactlError(list(args)[:1], -1, str(exc)) from None
    except ValueError as exc:  # an argument holding a NUL byte (a run's conf): every retry meets it
        cause = f"{command!r} could not be started: {exc}"
        say_cause(cause)
        raise LambdactlRefused(list(args)[:1], -1, cause) from None
    except subprocess.TimeoutExpired as exc:  # the command was killed; the next try starts afresh
        cause = f"{command} did not finish within {timeout_s:.0f}s (the task's execution_timeout): stopped"
        say_cause(cause)
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        raise LambdactlError(list(args), -9, f"{stderr}\n{cause}") from None
    print(done.stderr[-20_000:])  # into the task log, for the Airflow UI
    if done.returncode != 0:
        said = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        if done.returncode not in expected:
            say_cause(f"{command} exited {done.returncode}: {said[-1] if said else 'no message'}")
        if done.returncode == REFUSED and REFUSED not in expected and not refusal_retried:
            raise LambdactlRefused(list(args), done.returncode, done.stderr)
        raise LambdactlError(list(args), done.returncode, done.stderr)
    lines = [line for line in done.stdout.splitlines() if line.strip().startswith("{")]
    try:
        return json.loads(lines[-1]) if lines else {}
    except ValueError:
        cause = f"{command} printed a line that is no JSON object: {lines[-1][:200]}"
        say_cause(cause)
        raise LambdactlError(list(args), done.returncode, cause) from None


def refuse_undeclared_conf(params: Iterable[str]) -> None:
    """A run's conf naming a key its DAG does not take (`view` for `views`, `force`) was passed over:
    the run did what it would have done unasked. Refused, naming it and the keys the DAG takes."""
    taken = tuple(params)
    run = context().get("dag_run")
    conf = getattr(run, "conf", None) or {}
    unknown = sorted(str(k)[:60] for k in conf if k not in taken)
    if unknown:
        takes = f"it takes {', '.join(taken)}" if taken else "it takes none"
        cause = f"the run's conf names {', '.join(unknown[:10])}: not a parameter of this DAG; {takes}"
        say_cause(cause)
        raise AirflowFailException(cause)
