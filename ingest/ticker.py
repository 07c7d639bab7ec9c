"""Tick records: one per partition of `events` every `Settings.tick_interval_s` (a sixth of an ingest
bucket, within 5–60 s, unless set).

Kafka stamps each tick with its LogAppendTime like any record, so once the archiver has archived
past a tick it knows the partition holds nothing older that is not archived, even when no events
arrive. Ticks carry the key definitions.events.TICK_KEY and an empty value; every reader of the
topic in this platform drops them before validation.
"""

from __future__ import annotations

import logging
import threading

from definitions.events import TICK_KEY
from definitions.settings import Settings

log = logging.getLogger(__name__)


class Ticker(threading.Thread):
    def __init__(self, settings: Settings) -> None:
        super().__init__(name="lambda-ticker", daemon=True)
        self.settings = settings
        self.stopped = threading.Event()
        self.sent = 0

    def run(self) -> None:
        from stores import kafka

        topic = self.settings.kafka.events_topic
        producer = kafka.producer(self.settings, "lambda-ticker")
        try:
            while not self.stopped.is_set():
                try:
                    for partition in sorted(producer.partitions_for(topic) or ()):
                        producer.send(topic, key=TICK_KEY, value=b"", partition=partition)
                        self.sent += 1
                    producer.flush(timeout=10)
                except Exception:  # keep ticking through a broker hiccup; completeness just pauses
                    log.exception("could not send tick records")
                self.stopped.wait(self.settings.tick_interval_s)
        finally:
            producer.close(timeout=5)

    def stop(self) -> None:
        self.stopped.set()
