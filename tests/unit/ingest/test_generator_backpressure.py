"""The generator waits for Kafka once MAX_UNACKNOWLEDGED_BYTES are handed to its producer and not yet
acknowledged: kafka-python bounds no buffer, so a generator faster than Kafka held every record it
made. The producer here is a stand-in that acknowledges only when the test says so (what is checked
is the generator's own pacing, not Kafka)."""

from __future__ import annotations

import threading
import time

from ingest import generator
from ingest.generator import GeneratorConfig

BOUND = 20_000


class HeldFuture:
    def __init__(self) -> None:
        self.callbacks: list = []

    def add_callback(self, fn) -> None:
        self.callbacks.append(fn)

    def add_errback(self, fn) -> None:
        pass


class SlowKafka:
    """Acknowledges nothing until `release` is called."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: list[tuple[HeldFuture, int]] = []
        self.handed = 0  # bytes sent and not acknowledged
        self.most = 0

    def send(self, topic, key=None, value=b""):
        future = HeldFuture()
        with self.lock:
            self.handed += len(value)
            self.most = max(self.most, self.handed)
            self.held.append((future, len(value)))
        return future

    def release(self) -> None:
        with self.lock:
            held, self.held = self.held, []
        for future, size in held:
            with self.lock:
                self.handed -= size
            for fn in future.callbacks:
                fn(None)

    def flush(self, timeout=None) -> None:
        self.release()

    def close(self, timeout=None) -> None:
        pass


def test_the_generator_waits_for_kafka_past_its_bound(settings, monkeypatch):
    kafka = SlowKafka()
    monkeypatch.setattr(generator, "MAX_UNACKNOWLEDGED_BYTES", BOUND)
    monkeypatch.setattr("stores.kafka.producer", lambda *args, **kwargs: kafka)
    reports: list = []
    run = threading.Thread(target=lambda: reports.append(generator.produce(settings, GeneratorConfig(count=2_000))))
    run.start()
    deadline = time.monotonic() + 60
    while run.is_alive() and time.monotonic() < deadline:
        with kafka.lock:
            waiting = kafka.handed >= BOUND
        if waiting:  # Kafka acknowledges what it holds; the most ever held is checked below
            kafka.release()
        time.sleep(0.01)
    run.join(timeout=60)
    assert not run.is_alive(), "the generator never finished"
    assert reports and reports[0].sent == 2_000, reports
    assert BOUND <= kafka.most < BOUND + 2_048, kafka.most
