"""Waiting for a condition in a test: poll it until it holds or a deadline passes, never a bare sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T], what: str, timeout_s: float, interval_s: float = 1.0) -> T:
    """Call `check` until it returns something truthy, and return that; fail naming `what` (and the
    last value seen) once `timeout_s` has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {timeout_s:g}s for {what}; last seen: {value!r}")
        time.sleep(interval_s)


def ended(pid: int) -> bool:
    """Whether process `pid` has ended: gone, or a zombie (reparented, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True
