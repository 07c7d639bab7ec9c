"""Errors of the stack manager. Each names the service it is about."""

from __future__ import annotations


class StackError(Exception):
    """Something in the local stack is wrong; the message says what and, where known, why."""

    def __init__(self, service: str, reason: str, log_tail: str = "") -> None:
        self.service = service
        self.reason = reason
        self.log_tail = log_tail
        message = f"{service}: {reason}"
        if log_tail:
            message += f"\n--- last lines of the {service} log ---\n{log_tail}"
        super().__init__(message)
