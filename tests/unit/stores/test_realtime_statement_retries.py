"""Realtime statements are retried through a store's brief outage, but a statement Cassandra refuses
as invalid fails at once, naming why: retrying it for `speed.store_outage_s` only delayed the error
(no Cassandra here: the driver's concurrent execution is a stand-in answering per statement)."""

from __future__ import annotations

import pytest
from cassandra import InvalidRequest, WriteTimeout

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


def test_a_timeout_is_retried_until_the_statement_goes_through(answers):
    queue, calls = answers
    timeout = WriteTimeout("timed out", consistency=1, required_responses=1, received_responses=0, write_type=0)
    queue.extend([[None, timeout], [timeout], [None]])
    realtime_statements.execute_all_with_retries(object(), [("s", ()), ("s", ())], 2, give_up_after_s=600)
    assert calls == [2, 1, 1]
