"""What `lambdactl status` shows of the stack: each service's process, health and restarts, and
the supervisor's own row."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil

from infra.process import ProcessSupervisor
from infra.restarts import Budget
from infra.supervisor_config import NAME as SUPERVISOR
from stores.restarts import restart_report

if TYPE_CHECKING:
    from infra.stack import Stack


@dataclass
class ServiceStatus:
    name: str
    running: bool
    pid: int | None
    rss_mb: float
    healthy: bool
    detail: str
    uptime_s: float = 0.0
    # Restarts the supervisor made, and the last one's reason.
    restarts: int = 0
    restart_detail: str = ""


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    try:
        members = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    for member in members:
        try:
            total += member.memory_info().rss
        except psutil.Error:
            pass
    return total


def status(stack: Stack, probe: bool = True) -> list[ServiceStatus]:
    """One row per service of `stack`, and one for supervisord when it runs any of them; never raises."""
    result = []
    restarts = restart_report(stack.settings, with_log=True) if stack.programs else {}
    supervisor_runs = stack.supervisord.running() if stack.programs else False
    supervisor_answers = stack.supervisord.answering() if supervisor_runs else False
    with stack.supervisord.one_view(supervisor_answers):
        result += _rows(stack, restarts, supervisor_runs, supervisor_answers, probe)
        if any(stack.supervisor.supervised(s.name) for s in stack.services):
            result.append(supervisor_status(stack, supervisor_answers))
    return result


def _rows(stack: Stack, restarts: dict, supervisor_runs: bool, supervisor_answers: bool, probe: bool) -> list:
    result = []
    for service in stack.services:
        proc = stack.supervisor.process(service.name)
        unsupervised = proc is None and (proc := stack.supervisor.left_running(service.name)) is not None
        row = restarts.get(service.name, {}) if stack.supervisor.supervised(service.name) else {}
        count, why = (
            row.get("restarts_total", 0),
            (row.get("summary", "") if row.get("restarts_total") or row.get("gave_up") else ""),
        )
        if proc is None:
            if not stack.supervisor.supervised(service.name):
                detail = "not running"
            elif not supervisor_runs:  # a restart it had planned will not come: no stale "restarting in"
                last, why = row.get("last_reason"), why if row.get("gave_up") else ""
                detail = "not running (nor is the supervisor: run `lambdactl up`)" + (
                    f"; last exit: {last}" if last else ""
                )
            elif not supervisor_answers:
                detail = "unknown: supervisord runs but does not answer (its programs may run on)"
                why = why if row.get("gave_up") else ""
            else:
                detail = why or "not running"
            result.append(ServiceStatus(service.name, False, None, 0.0, False, detail, 0.0, count, why))
            continue
        healthy, detail = False, ""
        if probe:
            try:
                detail = service.check(stack.settings)
                healthy = True
            except Exception as exc:  # report, never raise, from status
                detail = str(exc) if str(exc).startswith("stuck: ") else f"unhealthy: {type(exc).__name__}: {exc}"
        if unsupervised:
            detail = (
                f"running without the supervisor (it was killed): nothing restarts it if it exits; "
                f"`lambdactl up` replaces it ({detail})"
            )
        rss = (_tree_rss(proc) if unsupervised else stack.supervisor.rss_bytes(service.name)) / 2**20
        result.append(
            ServiceStatus(
                service.name, True, proc.pid, rss, healthy, detail, time.time() - proc.create_time(), count, why
            )
        )
    return result


def supervisor_status(stack: Stack, answers: bool) -> ServiceStatus:
    proc = ProcessSupervisor.process(stack.supervisor, SUPERVISOR)
    budget = Budget.from_settings(stack.settings)
    if proc is None:
        return ServiceStatus(
            SUPERVISOR,
            False,
            None,
            0.0,
            False,
            "not running: nothing restarts a process of the stack that exits (run `lambdactl up`)",
        )
    listener = stack.supervisord.listener_state() if answers else "UNKNOWN"
    detail = (
        "supervisord does not answer"
        if not answers
        else f"supervisord runs, but its restart listener is {listener}: nothing restarts a process "
        "that exits (see logs/restarts.log; `lambdactl up` starts it again)"
        if listener not in ("RUNNING", "STARTING")  # BACKOFF: it exited; UNKNOWN: supervisord has no such program
        else f"supervisord restarts the stack's processes, {budget.describe()}, backoff "
        f"{budget.backoff_s:.0f}s doubling to {budget.backoff_max_s:.0f}s"
    )
    answers = answers and listener in ("RUNNING", "STARTING")
    try:
        rss = proc.memory_info().rss / 2**20
    except psutil.Error:
        rss = 0.0
    return ServiceStatus(SUPERVISOR, True, proc.pid, rss, answers, detail, time.time() - proc.create_time())
