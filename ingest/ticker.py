"""Tick records: one per partition of `events` every `Settings.tick_interval_s` (a sixth of an ingest
bucket, within 5–60 s, unless set).

Kafka stamps each tick with its LogAppendTime like any record, so once the archiver has archived
past a tick it knows the partition holds nothing older that is not archived, even when no events
arrive. Ticks carry the key definitions.events.TICK_KEY and an empty value; every reader of the
topic in this platform drops them before counting anything (the speed layer lets those the broker
stamped move its watermark first: speed_layer.first_copies).
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
        self.retry_s = 5.0  # between attempts to reach a broker the producer could not

    def run(self) -> None:
        from stores import kafka

        topic = self.settings.kafka.events_topic
        producer = None
        try:
            while not self.stopped.is_set():
                try:
                    if producer is None:  # a broker unreachable now (at start too) only pauses the ticks
                        producer = kafka.producer(self.settings, "lambda-ticker")
                    for partition in sorted(producer.partitions_for(topic) or ()):
                        producer.send(topic, key=TICK_KEY, value=b"", partition=partition)
                        self.sent += 1
                    producer.flush(timeout=10)
                except Exception:  # keep ticking through a broker hiccup; completeness just pauses
                    log.exception("could not send tick records")
                    if producer is None:
                        self.stopped.wait(self.retry_s)
                        continue
                self.stopped.wait(self.settings.tick_interval_s)
        finally:
            if producer is not None:
                producer.close(timeout=5)

    def stop(self) -> None:
        self.stopped.set()
