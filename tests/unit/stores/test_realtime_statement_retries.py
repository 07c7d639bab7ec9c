"""Realtime statements are retried through a store's brief outage, but a statement Cassandra refuses
as invalid fails at once, naming why: retrying it for `speed.store_outage_s` only delayed the error
(no Cassandra here: the driver's concurrent execution is a stand-in answering per statement)."""

from __future__ import annotations

import pytest
from cassandra import InvalidRequest, Unauthorized, WriteTimeout

from stores import realtime_statements


@pytest.fixture
def answers(monkeypatch):
    """A queue of answers, one list per attempt: an exception for a statement that failed."""
    import cassandra.concurrent

    queue: list[list] = []
    calls: list[int] = []

    def execute_concurrent(session, pending, concurrency, raise_on_first_error):
        calls.append(len(pending))
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        return [(not isinstance(a, Exception), a) for a in answer[: len(pending)]]

    monkeypatch.setattr(cassandra.concurrent, "execute_concurrent", execute_concurrent)
    monkeypatch.setattr(realtime_statements.time, "sleep", lambda s: None)
    return queue, calls


def test_a_statement_refused_as_invalid_fails_at_once_naming_why(answers):
    queue, calls = answers
    queue.append([None, InvalidRequest("Batch too large")])
    with pytest.raises(RuntimeError, match="refused.*InvalidRequest.*Batch too large"):
        realtime_statements.execute_all_with_retries(object(), [("s", ()), ("s", ())], 2, give_up_after_s=600)
    assert calls == [2], "not retried"


@pytest.mark.parametrize(
    "passing",
    [
        WriteTimeout("timed out", consistency=1, required_responses=1, received_responses=0, write_type=0),
        InvalidRequest("unconfigured table realtime_by_key"),  # a coordinator behind a schema change
        InvalidRequest("Keyspace lambda_speed does not exist"),
        Unauthorized("User lambda has no MODIFY permission"),  # a permissions cache behind a grant
    ],
)
def test_what_may_pass_on_a_retry_is_retried_until_the_statement_goes_through(answers, passing):
    queue, calls = answers
    queue.extend([[None, passing], [passing], [None]])
    realtime_statements.execute_all_with_retries(object(), [("s", ()), ("s", ())], 2, give_up_after_s=600)
    assert calls == [2, 1, 1]


def test_a_store_that_hangs_fails_the_writes_near_store_outage_s_not_a_round_of_timeouts_later(monkeypatch):
    """Against a node that answers nothing each statement waits out the driver's timeout, and the
    deadline was checked only after a whole round: 1,000 statements at 8 in flight held the writes
    ~20 minutes past `speed.store_outage_s` (60 s), each micro-batch. A round stops at the deadline."""
    import cassandra.concurrent

    clock = [0.0]
    timeout_s = 10.0
    monkeypatch.setattr(realtime_statements.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(realtime_statements.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))

    def execute_concurrent(session, pending, concurrency, raise_on_first_error):
        clock[0] += timeout_s * -(-len(pending) // concurrency)  # every statement times out, `concurrency` at once
        return [(False, OSError("timed out")) for _ in pending]

    monkeypatch.setattr(cassandra.concurrent, "execute_concurrent", execute_concurrent)
    with pytest.raises(RuntimeError, match="still failing"):
        realtime_statements.execute_all_with_retries(object(), [("s", ())] * 1_000, 8, give_up_after_s=60)
    assert clock[0] <= 60 + 4 * timeout_s + 10, clock[0]


def test_the_writes_and_their_mark_share_one_deadline(monkeypatch):
    import cassandra.concurrent

    clock = [0.0]
    monkeypatch.setattr(realtime_statements.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(realtime_statements.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    outcomes = iter([False, True])  # the writes: a retry, then through at 52 s

    def execute_concurrent(session, pending, concurrency, raise_on_first_error):
        clock[0] += 25.0
        ok = next(outcomes)
        return [(ok, None if ok else OSError("timed out")) for _ in pending]

    monkeypatch.setattr(cassandra.concurrent, "execute_concurrent", execute_concurrent)
    deadline = realtime_statements.time.monotonic() + 60
    realtime_statements.execute_all_with_retries(object(), [("s", ())], 1, give_up_after_s=60, deadline=deadline)
    outcomes = iter([False] * 10)  # the mark: failing at 77 s, past the writes' deadline (its own was 112 s)
    with pytest.raises(RuntimeError, match="still failing after 1 attempts"):
        realtime_statements.execute_all_with_retries(object(), [("m", ())], 1, give_up_after_s=60, deadline=deadline)
