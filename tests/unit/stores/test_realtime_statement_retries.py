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
