"""Stopping the stack: `lambdactl down`, and one supervised process stopped or restarted alone."""

from __future__ import annotations

import logging
import time
import xmlrpc.client
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from infra import services as svc
from infra.errors import StackError
from infra.process import ProcessSupervisor
from infra.stack_waits import await_supervised
from infra.state_lock import stack_lock
from stores.restarts import read_status

if TYPE_CHECKING:
    from infra.stack import Stack

log = logging.getLogger(__name__)


def stop(stack: Stack, name: str) -> bool:
    """Stop one of the stack's supervised processes and keep it stopped until the next `up`
    starts it (Supervisord.take_out: not even a restart the listener had pending starts it);
    whether it ran. StackError when it is not one of them, or supervisord does not answer (a
    process it left behind may still run)."""
    if not any(p.name == name for p in stack.programs):
        raise StackError(name, f"not a supervised process; those are {', '.join(p.name for p in stack.programs)}")
    refuse_unsupervised(stack, name)
    if not stack.supervisord.answering():
        raise StackError(
            name,
            "supervisord does not answer, and a process it started may still run: `lambdactl up` first",
        )
    with stack.supervisord.lock():
        ran = stack.supervisor.process(name) is not None
        stack.supervisord.take_out(name)
    if stack.supervisor.process(name) is not None:
        raise StackError(name, "still running after it was stopped")
    return ran


def restart(stack: Stack, name: str) -> float:
    """Stop one of the stack's supervised processes and start it again; the seconds until it
    was healthy. StackError when it is not one of them, or does not come back healthy."""
    service = next((p for p in stack.programs if p.name == name), None)
    if service is None:
        raise StackError(name, f"not a supervised process; those are {', '.join(p.name for p in stack.programs)}")
    refuse_unsupervised(stack, name)
    stack.cancelled.clear()
    # Under the stack lock: an `up` or `down` in another shell is not undone half-way. (Callers
    # holding views.lock take it first: lambdactl views apply, lambdactl reset-speed.)
    with stack_lock(stack.settings.state_dir, lambda msg: log.info("%s", msg)), stack.supervisord.lock():
        if not stack.supervisord.answering():
            raise StackError(name, "the supervisor is not answering: start the stack with `lambdactl up`")
        try:  # asked directly: all_info() is empty both on a failed call and with no program left
            listed = {info["name"] for info in stack.supervisord.rpc().getAllProcessInfo()}
        except (OSError, xmlrpc.client.Error) as exc:
            raise StackError(
                name, f"the supervisor did not list its programs ({type(exc).__name__}): try again"
            ) from None
        if name not in listed:
            raise StackError(
                name,
                "not under the supervisor now (`lambdactl reset-speed` or `down` took it out): "
                "`lambdactl up` adds it back and starts it",
            )
        try:
            stack.supervisord.stop(name)
        except BaseException:  # also when interrupted: a program stopped here is started again
            try:
                stack.supervisord.start(name)
            except Exception as exc:  # the first failure is the one to report
                log.warning("starting %s again after its stop failed: %s", name, exc)
            raise
        since = time.time()
        stack.supervisord.start(name)
    return await_supervised(stack, service, since)[1]


def refuse_unsupervised(stack: Stack, name: str) -> None:
    """StackError when `name` runs outside the supervisor (a store an earlier release started
    with a pid file of its own): starting it under the supervisor would run it twice."""
    if not stack.supervisor.supervised(name) and stack.supervisor.process(name) is not None:
        raise StackError(
            name,
            "runs outside the supervisor (started by an earlier release): `lambdactl down`, then `lambdactl up` "
            "starts it under the supervisor",
        )


def down(stack: Stack, say: Callable[[str], None]) -> dict[str, str]:
    """Stop the services of `stack` (the platform's first, the stores last); what each did. The
    caller holds the stack lock."""
    timeout = stack.settings.stack.stop_timeout_s
    outcome = {}
    # The platform's processes first (the supervisor must not restart them while the stores go).
    running = {
        n for n, i in stack.supervisord.all_info().items() if i["statename"] in ("RUNNING", "STARTING", "BACKOFF")
    }
    stores = stack.store_names  # stopped once what uses them is
    asked = [s.name for s in stack.services if s.name in running]
    with stack.supervisord.lock():
        if stack.whole_stack:
            if stack.supervisord.shutdown(last=stores):
                say("supervisor: stopped, and every process it ran")
        else:  # also when none of them ran (given up, say): a supervisor left with nothing to run goes
            if asked:
                stack.supervisord.stop_at_once(last=stores, only=asked)
            if nothing_supervised(stack) and stack.supervisord.shutdown():
                say("supervisor: stopped (no other process of the stack runs)")
    for name in asked:
        outcome[name] = "stopped"
    if stack.whole_stack:  # what a supervisor that died left running, the stores after the others
        left = stack.supervisor.orphan_programs()
        ended = stack.supervisor.end_orphans(timeout, last=stack.store_names)
        if ended:
            say(f"stopped {ended} process(es) a supervisor that is gone had left running")
            outcome.update({s.name: "stopped" for s in stack.services if s.name in left})
    members = list(stack.services)
    if stack.whole_stack:  # a Spark cluster started under other settings goes too, and a store an
        # earlier `up` started before it was taken out of stack.managed_services (its pid file says)
        members = list(dict.fromkeys([*members, svc.SPARK_MASTER, *svc.SPARK_WORKERS, *svc.ALL]))
    with ThreadPoolExecutor(max_workers=max(1, len(members))) as pool:
        # Platform processes started before the supervisor still have pid files of their own.
        stopped = dict(
            zip(
                [s.name for s in members],
                pool.map(
                    lambda s: (
                        stack.supervisor.pid_file(s.name).exists()
                        and ProcessSupervisor.stop(stack.supervisor, s.name, timeout)
                    ),
                    members,
                ),
            )
        )
    for name, ran in stopped.items():
        if ran:
            outcome[name] = "stopped"
        elif name not in (s.name for s in stack.services):
            continue
        outcome.setdefault(name, "was not running")
        if outcome[name] == "stopped":
            say(f"{name}: stopped")
    if stack.whole_stack:
        killed = stack.supervisor.end_orphans(timeout, last=stack.store_names)
        if killed:
            say(f"ended {killed} orphaned process(es) of this state dir")
    return outcome


def nothing_supervised(stack: Stack) -> bool:
    """supervisord answers, runs no program, and has no restart pending for one."""
    info = stack.supervisord.all_info()
    if not info or any(i["statename"] in ("RUNNING", "STARTING", "BACKOFF", "STOPPING") for i in info.values()):
        return False
    known = read_status(stack.settings.state_dir)["processes"]
    return not any(known.get(name, {}).get("next_restart_at") for name in info)
