"""The pieces of the accuracy-report scenario (tests/integration/reports/conftest.py): valid records
archived long ago and re-sent byte for byte, the window a real batch run closes, and a comparison
narrowed to a test's own keys."""

from __future__ import annotations

import dataclasses
import json
import time

from batch_layer.job import CutoffError, choose_cutoff, run_batch
from ingest.generator import GeneratorConfig, SentRecord
from reports import build, read
from stores.batch_views import VersionStore
from tests.support.events import fresh_seed, send, wait_archived, wait_cutoff_past

HOUR = 3_600


LATE_PAGE_VIEWS = "event_type = 'page_view' AND late"


def old_records(settings, spark, min_age_s: float, seed: int) -> dict[str, list[tuple[int, int]]]:
    """Kafka positions of valid records archived more than `min_age_s` ago, each the only copy of its
    event, by kind: ordinary page views, page views that were late already, and a few other event types."""
    from pyspark.sql import functions as F

    from stores.master import read_master

    master = read_master(spark, settings)
    single = master.groupBy("event_id").count().where("count = 1").select("event_id")
    old = (
        master.where(F.col("ingest_time") < F.timestamp_millis(F.lit(int((time.time() - min_age_s) * 1000))))
        .join(single, "event_id", "left_semi")
        .withColumn("late", (F.unix_seconds("ingest_time") - F.unix_seconds("event_time")) > HOUR)
        .withColumn("pick", F.hash("event_id", F.lit(seed)))
    )
    picks = {}
    for where, n in (
        ("event_type = 'page_view' AND NOT late", 16),
        (LATE_PAGE_VIEWS, 8),
        ("event_type != 'page_view'", 6),
    ):
        picks[where] = [
            (r.kafka_partition, r.kafka_offset)
            for r in old.where(where).orderBy("pick").limit(n).select("kafka_partition", "kafka_offset").collect()
        ]
    return picks


def raw_records(settings, positions: list[tuple[int, int]]) -> list:
    """The Kafka records (key and exact value bytes) at the given positions."""
    from kafka import TopicPartition

    from stores.kafka import consumer as kafka_consumer

    consumer = kafka_consumer(settings, "lambda-test-resend", max_poll_records=1)
    out = []
    try:
        for partition, offset in positions:
            tp = TopicPartition(settings.kafka.events_topic, partition)
            consumer.assign([tp])
            consumer.seek(tp, offset)
            deadline = time.monotonic() + 30
            found = None
            while found is None and time.monotonic() < deadline:
                for msg in consumer.poll(timeout_ms=1000).get(tp, []):
                    if msg.offset == offset:
                        found = msg
            assert found is not None, f"record {partition}/{offset} not found in Kafka"
            out.append(found)
    finally:
        consumer.close()
    return out


def resend(settings, messages: list) -> list[SentRecord]:
    """Send the exact bytes again (same key, same value); what Kafka stamped them with."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap, acks="all", client_id="lambda-test-resend")
    try:
        futures = [(m, producer.send(settings.kafka.events_topic, key=m.key, value=m.value)) for m in messages]
        producer.flush()
        sent = []
        for m, future in futures:
            md = future.get(timeout=30)
            sent.append(
                SentRecord(
                    "resend", json.loads(m.value)["event_id"], md.partition, md.offset, md.timestamp, m.value.decode()
                )
            )
        return sent
    finally:
        producer.close()


def wait_for_old_records(settings, spark, min_age_s: float, seed: int) -> list[tuple[int, int]]:
    """Old enough records, late page views among them; when the master dataset has too few (a fresh
    stack, or a history without late page views), sends some and waits until they are old enough (slow)."""

    def enough(picks: dict[str, list]) -> bool:
        return sum(map(len, picks.values())) >= 20 and len(picks[LATE_PAGE_VIEWS]) >= 2

    picks = old_records(settings, spark, min_age_s, seed)
    if enough(picks):
        return [p for kind in picks.values() for p in kind]
    # Its own seed: the scenario's workload is generated from `seed`, and event ids derive from the
    # seed, so seeding with it too would make that workload's events duplicates of these.
    seeding = fresh_seed()
    seeded = send(
        settings,
        GeneratorConfig(
            seed=seeding,
            count=400,
            pages=20,
            url_prefix=f"/acc-seed-{seeding}",
            late_fraction=0.3,
            late_min_s=2 * HOUR,
            late_max_s=5 * HOUR,
        ),
    )
    wait_archived(settings, seeded)
    time.sleep(max(0.0, max(r.ingest_time_ms for r in seeded) / 1000 + min_age_s + 5 - time.time()))
    picks = old_records(settings, spark, min_age_s, seed)
    assert enough(picks), f"too few old records even after seeding: { {k: len(v) for k, v in picks.items()} }"
    return [p for kind in picks.values() for p in kind]


def move_speed_watermark(settings) -> None:
    """Two small workloads, each waited for in the realtime rows. The speed layer keeps an event id
    in its de-duplication state until its watermark (the newest ingest time it saw, less the window)
    is a window past that id's copy: the watermark moves with traffic, not with the clock. With none
    since the records to re-send were archived (a fresh or idle platform) their ids are still there,
    however old by the clock, and the re-sends would be dropped, not counted again. The second
    workload's micro-batch runs with the first one's watermark: ids older than twice the window are
    gone once it is in the rows."""
    from tests.support.realtime import wait_until_exact

    for _ in range(2):
        seed = fresh_seed()
        nudge = send(settings, GeneratorConfig(seed=seed, count=30, pages=3, url_prefix=f"/acc-watermark-{seed}"))
        wait_until_exact(settings, nudge)


def batch_window(settings, spark, sent: list[SentRecord]):
    """Wait until the master dataset is complete past the ingest bucket of the newest record, choose
    that cutoff, wait until the speed layer has committed everything before it, read its rows,
    then run the real batch at that cutoff. (cutoff, BatchResult, realtime snapshot)."""
    for attempt in range(3):
        wait_cutoff_past(settings, sent)
        cutoff = choose_cutoff(settings, None, VersionStore(settings).pointer())
        speed = read.wait_for_speed_layer(settings, cutoff, timeout_s=240)
        assert speed["caught_up"], f"the speed layer did not reach the cutoff: {speed}"
        snapshot = read.read_realtime(settings, 0, cutoff)
        try:
            return cutoff, run_batch(settings, cutoff_ms=cutoff, spark=spark), snapshot
        except CutoffError:  # another run moved serving past this cutoff meanwhile: plan again
            if attempt == 2:
                raise


def only_keys(comparison: build.Comparison, keep) -> build.Comparison:
    """The comparison with only the cells whose key `keep(view, key values)` accepts (before any
    figure is computed from them)."""
    views = {v.name: v for v in comparison.views}
    cells = {
        name: [c for c in cells if keep(views[name], tuple(json.loads(c.key)))]
        for name, cells in comparison.cells.items()
    }
    return dataclasses.replace(comparison, cells=cells)
