"""Puts sent through several connections at once (stores/put_pipeline.py), against connections kept
in memory that behave like happybase's (table → batch → put, send). Whether HBase holds what was put
is shown on the real store by the batch layer's integration tests and bench/batch_hbase_load.py."""

from __future__ import annotations

import threading
import time

import pytest

from stores.put_pipeline import send_puts


class Sent:
    """What every connection sent, shared by the connections of one call."""

    def __init__(self, fail_at: int | None = None, delay_s: float = 0.0, refuse: bool = False) -> None:
        self.rows: list[bytes] = []
        self.batches = 0
        self.closed = 0
        self.opened = 0
        self.fail_at = fail_at
        self.delay_s = delay_s
        self.refuse = refuse
        self.lock = threading.Lock()

    def connect(self):
        with self.lock:
            self.opened += 1
        if self.refuse:
            raise ConnectionRefusedError("the Thrift server is not there")
        return Connection(self)


class Connection:
    def __init__(self, sent: Sent) -> None:
        self.sent = sent

    def table(self, name: str):
        assert name == "t"
        return self

    def batch(self):
        return Batch(self.sent)

    def close(self) -> None:
        with self.sent.lock:
            self.sent.closed += 1


class Batch:
    def __init__(self, sent: Sent) -> None:
        self.sent = sent
        self.rows: list[bytes] = []

    def put(self, row: bytes, data: dict[bytes, bytes]) -> None:
        assert data == {b"d:v": row}
        self.rows.append(row)

    def send(self) -> None:
        time.sleep(self.sent.delay_s)
        with self.sent.lock:
            if self.sent.fail_at is not None and self.sent.batches >= self.sent.fail_at:
                raise OSError("the region server went away")
            self.sent.batches += 1
            self.sent.rows.extend(self.rows)


def cells(n: int, made: list[int] | None = None):
    for i in range(n):
        if made is not None:
            made.append(i)
        row = f"r{i:07d}".encode()
        yield row, {b"d:v": row}


@pytest.mark.parametrize(("n", "batch_size", "senders"), [(0, 10, 2), (1, 10, 1), (1_001, 10, 3), (500, 7, 2)])
def test_every_row_is_put_once_whatever_the_sizes(n, batch_size, senders):
    sent = Sent()
    assert send_puts(sent.connect, "t", cells(n), batch_size, senders) == n
    assert sorted(sent.rows) == [row for row, _ in cells(n)]
    assert sent.batches == -(-n // batch_size)
    assert sent.opened == sent.closed == senders


def test_a_failed_send_is_raised_and_the_input_is_not_read_to_its_end():
    sent = Sent(fail_at=3)
    made: list[int] = []
    with pytest.raises(OSError, match="region server went away"):
        send_puts(sent.connect, "t", cells(1_000_000, made), 100, 2)
    assert sent.batches == 3
    assert len(made) < 10_000, "the input was read on after the failure"
    assert sent.opened == sent.closed == 2


def test_a_connection_that_cannot_be_made_is_raised():
    sent = Sent(refuse=True)
    with pytest.raises(ConnectionRefusedError):
        send_puts(sent.connect, "t", cells(100_000), 100, 3)
    assert sent.rows == []


def test_a_slow_server_holds_the_input_back():
    """Memory stays bounded: the input is read at most a few batches ahead of what was sent."""
    sent = Sent(delay_s=0.002)
    made: list[int] = []
    ahead = []

    def watched():
        for cell in cells(3_000, made):
            with sent.lock:
                ahead.append(len(made) - len(sent.rows))
            yield cell

    assert send_puts(sent.connect, "t", watched(), 50, 2) == 3_000
    # 2 being sent, 2 waiting in the queue, 1 being made.
    assert max(ahead) <= 5 * 50


def test_an_input_that_fails_is_raised_and_every_connection_closed():
    sent = Sent()

    def broken():
        yield from cells(250)
        raise ValueError("a row the layout cannot encode")

    with pytest.raises(ValueError, match="cannot encode"):
        send_puts(sent.connect, "t", broken(), 100, 2)
    assert sent.opened == sent.closed == 2
