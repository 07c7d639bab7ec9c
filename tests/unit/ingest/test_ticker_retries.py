"""The ticker outlives a broker that cannot be reached when it starts: its thread died on the first
`NoBrokersAvailable`, nothing restarted it, and every partition without events stopped advancing the
completeness marker (so the batch cutoff froze) while the archiver looked healthy."""

from __future__ import annotations

import threading

from kafka.errors import NoBrokersAvailable

from ingest.ticker import Ticker


class _Producer:
    def __init__(self, sent: threading.Event) -> None:
        self.sent = sent
        self.records: list[int] = []

    def partitions_for(self, topic):
        return {0, 1}

    def send(self, topic, key, value, partition):
        self.records.append(partition)

    def flush(self, timeout):
        self.sent.set()

    def close(self, timeout):
        pass


def test_a_broker_unreachable_at_start_delays_the_ticks_only(settings, monkeypatch):
    from stores import kafka

    sent = threading.Event()
    producer = _Producer(sent)
    attempts = []

    def make(settings, client_id, **options):
        attempts.append(client_id)
        if len(attempts) < 3:
            raise NoBrokersAvailable()
        return producer

    monkeypatch.setattr(kafka, "producer", make)
    fast = settings.archiver.model_copy(update={"tick_interval_s": 0.01})
    ticker = Ticker(settings.model_copy(update={"archiver": fast}))
    ticker.retry_s = 0.01
    ticker.start()
    try:
        assert sent.wait(10), f"no tick sent after {len(attempts)} attempt(s)"
        assert ticker.is_alive() and producer.records[:2] == [0, 1]
    finally:
        ticker.stop()
        ticker.join(10)
    assert not ticker.is_alive()


def test_a_broker_away_for_long_is_logged_once_a_minute_without_tracebacks(settings, monkeypatch, caplog):
    """A tick failed every few seconds while Kafka was away, each with a whole traceback."""
    import logging

    from stores import kafka

    class Failing(_Producer):
        flushes = 0

        def flush(self, timeout):
            Failing.flushes += 1
            if Failing.flushes >= 20:
                self.sent.set()
            raise TimeoutError("no broker answered")

    sent = threading.Event()
    monkeypatch.setattr(kafka, "producer", lambda *args, **options: Failing(sent))
    fast = settings.archiver.model_copy(update={"tick_interval_s": 0.01})
    ticker = Ticker(settings.model_copy(update={"archiver": fast}))
    caplog.set_level(logging.INFO, logger="ingest.ticker")
    ticker.start()
    try:
        assert sent.wait(10), "fewer than 20 failed ticks"
    finally:
        ticker.stop()
        ticker.join(10)
    failures = [r for r in caplog.records if "could not send tick records" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in failures]
    assert failures[0].exc_info is None and "no broker answered" in failures[0].getMessage()
