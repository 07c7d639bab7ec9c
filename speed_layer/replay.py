"""Kappa-style replay: a view's realtime rows rebuilt by re-reading Kafka through the speed layer's own
code (validation, de-duplication, the view's cells, aggregation by ingest bucket, the realtime writer).

`lambdactl replay` (lambdactl/replay.py) claims the view, reads the offsets of the records ingested
from `--from` up to a bucket boundary after it began, then calls `rewrite` to write their rows under
a fresh storage name (stores.replays' shadow); the running speed layer keeps writing the view's own
rows meanwhile, and the serving layer switches to the shadow rows for those buckets once all are
written.
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


def rewrite(
    spark,
    settings: Settings,
    view: View,
    spans: list[PartitionSpan],
    timestamp_us: int,
    into: str | None = None,
    count_from_ms: int | None = None,
) -> Rewritten:
    """Aggregate the records of `spans` into `view`'s realtime rows and write them as of `timestamp_us`,
    under the storage name `into` (by default the view's own). With `count_from_ms`, the spans reach
    back further (the de-duplication window) only so that copies of events first ingested before it
    are dropped: only first copies ingested from it on are counted."""
    from pyspark.sql import functions as F

    from speed_layer.job import cells_by_ingest_bucket, partition_writer

    started = time.monotonic()
    offsets = {s.partition: (s.start, s.end) for s in spans if s.end > s.start}
    if not offsets:
        return Rewritten(view.name, 0, 0, time.monotonic() - started)
    records = sum(end - start for start, end in offsets.values())
    events = validated_events(kafka_range(spark, settings, offsets), settings.events)
    cells = cells_by_ingest_bucket(events, [view], settings, count_from_ms=count_from_ms)
    name = into or view.name
    if name != view.name:
        cells = cells.withColumn("view", F.lit(name))
    write = partition_writer(settings, {name: [(name, view.aggregation, view.layout)]}, timestamp_us)
    written = cells.mapInArrow(write, "written long, write_ms long").agg(F.sum("written")).collect()[0][0]
    done = Rewritten(view.name, records, int(written or 0), time.monotonic() - started)
    log.info(
        "replay of %s: %d records read, %d realtime rows written as %s in %.1fs",
        view.name,
        records,
        done.rows,
        name,
        done.seconds,
    )
    return done
