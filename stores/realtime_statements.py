"""Executing realtime statements: many in flight, retried through a store's brief outage, and
grouped by replica into unlogged batches (the speed layer's writes and the realtime clean-up)."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Sequence
from typing import Any

log = logging.getLogger(__name__)


def execute_with_retries(
    session, statement, params: Sequence[tuple], concurrency: int, give_up_after_s: float, what: str = "realtime writes"
) -> None:
    """Execute `statement` once per parameter tuple, many in flight (execute_all_with_retries)."""
    execute_all_with_retries(session, [(statement, p) for p in params], concurrency, give_up_after_s, what)


# How many waves of `concurrency` statements go out between two checks of the deadline.
WAVES_PER_CHECK = 4


def execute_all_with_retries(
    session,
    statements: Sequence[tuple[Any, Sequence[Any]]],
    concurrency: int,
    give_up_after_s: float,
    what: str = "realtime writes",
    deadline: float | None = None,
) -> None:
    """Execute every (statement, parameters), many in flight; retry the failed ones with backoff
    (up to 10 s apart) until `give_up_after_s` has passed (or the monotonic `deadline`, one several
    calls share), so a store that is restarting or briefly unreachable delays the work instead of
    failing it; then raise naming the error. A statement refused as invalid raises at once."""
    from cassandra.concurrent import execute_concurrent

    pending, error, attempt = list(statements), None, 0
    if deadline is None:
        deadline = time.monotonic() + give_up_after_s
    step = max(1, concurrency * WAVES_PER_CHECK)
    while pending:
        attempt += 1
        failed: list = []
        # In parts of a few waves, the deadline checked after each that failed: against a node that
        # answers nothing, every statement waits out the driver's timeout, and a whole round of them
        # outlasted the deadline many times over.
        for start in range(0, len(pending), step):
            part = pending[start : start + step]
            try:
                results = execute_concurrent(session, part, concurrency=concurrency, raise_on_first_error=False)
                part_failed = [p for p, (ok, _) in zip(part, results) if not ok]
                part_error = next((result for ok, result in results if not ok), None)
            except Exception as exc:  # every host down: the driver may raise instead of listing failures
                part_failed, part_error = part, exc
            if not part_failed:
                continue
            failed += part_failed
            error = part_error
            if _invalid(error):  # the statement itself is refused: sending it again cannot help
                raise RuntimeError(
                    f"{len(failed)} {what} refused by Cassandra as invalid: {type(error).__name__}: {error}"
                )
            if time.monotonic() >= deadline:
                unsent = len(pending) - start - len(part)
                raise RuntimeError(
                    f"{len(failed) + unsent} {what} still failing after {attempt} attempts in "
                    f"{give_up_after_s:.0f}s: {type(error).__name__}: {error}"
                )
        if failed:
            log.warning(
                "%d %s failed (attempt %d): %s: %s; retrying", len(failed), what, attempt, type(error).__name__, error
            )
            time.sleep(max(0.0, min(2**attempt, 10, deadline - time.monotonic())))
        pending = failed


def _invalid(error: BaseException | None) -> bool:
    """Whether Cassandra refused the statement itself (an invalid request: a batch too large, a value
    that does not fit its column): a retry never passes. A table or keyspace a coordinator does not
    know yet (its schema lags a change just made), a permission a cache has not caught up with, a
    timeout or a replica that is down may pass on a retry."""
    from cassandra import InvalidRequest

    return isinstance(error, InvalidRequest) and _SCHEMA_LAG.search(str(error)) is None


_SCHEMA_LAG = re.compile(r"unconfigured table|does not exist|[Uu]nknown (table|keyspace|column)")


ROW_OVERHEAD_BYTES = 32  # Cassandra counts a row's timestamps and cell headers too


def value_bytes(params: Sequence[Any]) -> int:
    """About how many bytes a row takes in a batch, as Cassandra's batch size limits count them."""
    return ROW_OVERHEAD_BYTES + sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in params if v is not None)


def replica_groups(statements: Iterable[Any], replicas_of, max_bytes: int) -> list[list[Any]]:
    """Statements (with `routing_key` and serialized `values`) in groups to send as one batch each:
    statements whose partitions live on the same replicas (`replicas_of(routing_key)`) together, in
    their order, each group up to `max_bytes` (value_bytes) unless one statement alone is larger.
    With `max_bytes` 0 every statement is a group of its own."""
    if max_bytes <= 0:
        return [[statement] for statement in statements]
    open_groups: dict[Any, tuple[list[Any], int]] = {}
    groups: list[list[Any]] = []
    for statement in statements:
        replicas = replicas_of(statement.routing_key)
        size = value_bytes(statement.values)
        group, used = open_groups.get(replicas, (None, 0))
        if group is None or used + size > max_bytes:
            group, used = [], 0
            groups.append(group)
        group.append(statement)
        open_groups[replicas] = (group, used + size)
    return groups


def replica_batches(bound: Iterable[Any], replicas_of, max_bytes: int) -> list[Any]:
    """Bound statements as unlogged batches of replica_groups (a group of one stays a statement)."""
    from cassandra.query import BatchStatement, BatchType

    out: list[Any] = []
    for group in replica_groups(bound, replicas_of, max_bytes):
        if len(group) == 1:
            out.append(group[0])
            continue
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        for statement in group:
            batch.add(statement)
        out.append(batch)
    return out
