"""Kappa-style replay: a view's realtime rows rebuilt by re-reading Kafka through the speed layer's own
code (validation, de-duplication, the view's cells, aggregation by ingest bucket, the realtime writer).

`lambdactl replay` (lambdactl/replay.py) marks the view, deletes its rows from the first ingest bucket
replayed, then calls `rewrite`. Every row is written with one timestamp taken before the end offsets
were read, so the running speed layer's later writes of the same groups (which cover records past
those offsets) win over the replay's, and its earlier ones lose to it: whichever order the writes
reach the store in, each group ends with the value of all its records.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from definitions.settings import Settings
from definitions.views import View
from stores.kafka import PartitionSpan
from stores.kafka_source import kafka_range, validated_events

log = logging.getLogger("lambda.replay")


@dataclass(frozen=True)
class Rewritten:
    view: str
    records: int  # Kafka records read: events valid or not, and the archiver's ticks
    rows: int  # realtime rows written
    seconds: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


def rewrite(spark, settings: Settings, view: View, spans: list[PartitionSpan], timestamp_us: int) -> Rewritten:
    """Aggregate the records of `spans` into `view`'s realtime rows and write them as of `timestamp_us`."""
    from pyspark.sql import functions as F

    from speed_layer.job import cells_by_ingest_bucket, partition_writer

    started = time.monotonic()
    offsets = {s.partition: (s.start, s.end) for s in spans if s.end > s.start}
    if not offsets:
        return Rewritten(view.name, 0, 0, time.monotonic() - started)
    records = sum(end - start for start, end in offsets.values())
    events = validated_events(kafka_range(spark, settings, offsets), settings.events)
    cells = cells_by_ingest_bucket(events, [view], settings)
    write = partition_writer(settings, {view.name: (view.aggregation, view.layout)}, timestamp_us)
    written = cells.mapInArrow(write, "written long, write_ms long").agg(F.sum("written")).collect()[0][0]
    done = Rewritten(view.name, records, int(written or 0), time.monotonic() - started)
    log.info(
        "replay of %s: %d records read, %d realtime rows written in %.1fs", view.name, records, done.rows, done.seconds
    )
    return done
