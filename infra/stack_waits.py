"""Waiting for the stack's services to become healthy: each against its own deadline, all at once,
and each failure reported by name with its reason, the likely cause and the tail of its log."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from infra.diagnoses import likely_causes
from infra.errors import StackError
from infra.restarts import Budget
from stores.restarts import read_status, summary

if TYPE_CHECKING:
    from infra.service_base import Service
    from infra.stack import Stack


def one_error(errors: list[StackError]) -> StackError:
    """The failures of several services as one error naming each."""
    if len(errors) == 1:
        return errors[0]
    return StackError(", ".join(e.service for e in errors), "\n\n".join(str(e) for e in errors))


def await_all(stack: Stack, members: list, outcome: dict[str, str], say: Callable[[str], None], wait) -> None:
    """Wait for every member concurrently; raise naming each that did not become healthy. An
    interrupt (Ctrl-C) ends every wait at its next poll, not at its deadline."""
    pool = ThreadPoolExecutor(max_workers=max(1, len(members)))
    try:
        futures = {s.name: pool.submit(wait, s) for s in members}
        errors = []
        for name, future in futures.items():
            try:
                detail, waited = future.result()
                if outcome[name] == "started":
                    stack.ready_after[name] = waited
                    say(f"{name}: healthy after {waited:.0f}s ({detail})")
            except StackError as exc:
                errors.append(exc)
    except BaseException:
        stack.cancelled.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    if errors:
        raise one_error(errors)


def await_supervised(stack: Stack, service, since: float) -> tuple[str, float]:
    """Poll until healthy; fail when the supervisor gave up on it, or at the deadline."""
    started = time.monotonic()
    deadline = started + service.timeout_s(stack.settings)
    last_error = "no answer yet"
    while True:
        entry = read_status(stack.settings.state_dir)["processes"].get(service.name, {})
        if (entry.get("gave_up_at") or 0) >= since:
            raise _loop_failure(stack, service, entry)
        state = stack.supervisord.all_info().get(service.name, {}).get("statename")
        if state is None and not stack.supervisord.running():
            raise _failure(stack, service, "the supervisor stopped running")
        if state == "STOPPED":
            raise _failure(stack, service, "was stopped before becoming healthy")
        if state in ("RUNNING", "STARTING"):
            try:
                return service.check(stack.settings), time.monotonic() - started
            except Exception as exc:  # a probe may fail in any client-specific way while starting
                last_error = f"{type(exc).__name__}: {exc}"
        else:
            last_error = f"{state or 'not started'}; {summary(entry)}"
        if time.monotonic() > deadline:
            raise _failure(
                stack, service, f"not healthy within {service.timeout_s(stack.settings):.0f}s (last: {last_error})"
            )
        _pause(stack, service)


def _loop_failure(stack: Stack, service, entry: dict) -> StackError:
    last = entry.get("last_exit") or {}
    # More lines than the restart listener keeps: a JVM's cause sits above its stack trace.
    tail = stack.supervisor.tail(service.name, 60) or "\n".join(last.get("log_tail", []))
    causes = likely_causes(tail)
    return StackError(
        service.name,
        (
            f"keeps dying: the supervisor gave up after {entry.get('restarts', 0)} restart(s) "
            f"({Budget.from_settings(stack.settings).describe()}); last exit: {last.get('reason')}"
            + (f"; likely cause: {causes[0]}" if causes else "")
            + f" (log: {stack.supervisor.log_file(service.name)}; restarts: {stack.settings.state_dir / 'logs' / 'restarts.log'})"
        ),
        tail,
    )


def await_healthy(stack: Stack, service: Service) -> tuple[str, float]:
    """Poll the probe of a store an earlier release started (its own pid file) until it answers;
    (what answered, seconds waited)."""
    started = time.monotonic()
    deadline = started + service.timeout_s(stack.settings)
    last_error = "no answer yet"
    while True:
        if stack.supervisor.process(service.name) is None:
            code = stack.supervisor.exit_code(service.name)
            raise _failure(
                stack, service, f"exited{'' if code is None else f' with code {code}'} before becoming healthy"
            )
        try:
            return service.check(stack.settings), time.monotonic() - started
        except Exception as exc:  # a probe may fail in any client-specific way while starting
            last_error = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            raise _failure(
                stack,
                service,
                f"not healthy within {service.timeout_s(stack.settings):.0f}s (last probe: {last_error})",
            )
        _pause(stack, service)


def _pause(stack: Stack, service) -> None:
    """A second between two polls of a wait; StackError at once when the command was interrupted."""
    if stack.cancelled.wait(1.0):
        raise StackError(service.name, "the wait for it was interrupted")


def _failure(stack: Stack, service: Service, what: str) -> StackError:
    tail = stack.supervisor.tail(service.name, 40)
    causes = likely_causes(tail)
    reason = what + (f"; likely cause: {causes[0]}" if causes else "")
    return StackError(service.name, f"{reason} (log: {stack.supervisor.log_file(service.name)})", tail)
