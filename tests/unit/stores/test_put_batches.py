"""The puts of a batch run's partition go to HBase in batches bounded in bytes as well as in count:
2,000 puts (batch.put_batch_size) of the longest keys the events limits allow were one mutateRows call
of tens of megabytes, which times out or exceeds the Thrift server's frame, at every run."""

from __future__ import annotations

from definitions.settings import Settings
from definitions.views import TOP_PAGES
from stores import batch_writer


class Batch:
    def __init__(self, sent: list[int]) -> None:
        self.sent = sent
        self.pending = 0

    def put(self, row: bytes, data: dict[bytes, bytes]) -> None:
        self.pending += len(row) + sum(len(k) + len(v) for k, v in data.items())

    def send(self) -> None:
        if self.pending:
            self.sent.append(self.pending)
        self.pending = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.send()
        return False


def test_puts_are_sent_in_batches_bounded_in_bytes(monkeypatch):
    sent: list[int] = []

    class Connection:
        def table(self, name):
            return type("Table", (), {"batch": lambda self, batch_size: Batch(sent)})()

        def close(self):
            pass

    monkeypatch.setattr(batch_writer, "hbase_connection", lambda _settings, timeout_s=10: Connection())
    long_url = "https://example.com/" + "x" * 2_000
    rows = [{"url": f"{long_url}{i}", "value": i, "event_bucket": 60 * i} for i in range(20_000)]
    batch_writer._write_partition(Settings(), "t", TOP_PAGES, "minute", iter(rows))
    one = max(sent)
    assert sum(sent) > 40_000_000, "every put was sent"
    assert one <= batch_writer.PUT_BATCH_BYTES + 3 * 2_100, one
