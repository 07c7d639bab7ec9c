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
import time

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
        self.quiet_s = 60.0  # between two logged failures: a broker away for hours wrote one traceback a tick
        self.last_logged = float("-inf")

    def run(self) -> None:
        from stores import kafka

        topic = self.settings.kafka.events_topic
        producer = None
        try:
            while not self.stopped.is_set():
                try:
                    if producer is None:  # a broker unreachable now (at start too) only pauses the ticks
                        # The partitions as of a tick ago: a partition added to the topic waited for the
                        # producer's metadata, refreshed every five minutes, and until it has a tick or
                        # an event the completeness of the whole topic is unknown.
                        refresh_ms = int(self.settings.tick_interval_s * 1000)
                        producer = kafka.producer(self.settings, "lambda-ticker", metadata_max_age_ms=refresh_ms)
                    for partition in sorted(producer.partitions_for(topic) or ()):
                        producer.send(topic, key=TICK_KEY, value=b"", partition=partition)
                        self.sent += 1
                    producer.flush(timeout=10)
                except Exception as exc:  # keep ticking through a broker hiccup; completeness just pauses
                    if time.monotonic() - self.last_logged >= self.quiet_s:
                        self.last_logged = time.monotonic()
                        log.warning("could not send tick records: %s: %s", type(exc).__name__, str(exc)[:300])
                    log.debug("tick records not sent", exc_info=True)
                    if producer is None:
                        self.stopped.wait(self.retry_s)
                        continue
                self.stopped.wait(self.settings.tick_interval_s)
        finally:
            if producer is not None:
                try:
                    producer.close(timeout=5)
                except Exception as exc:  # ticks still queued (Kafka away): kafka-python's close raises
                    log.warning("tick producer not closed cleanly: %s: %s", type(exc).__name__, str(exc)[:300])

    def stop(self) -> None:
        self.stopped.set()
