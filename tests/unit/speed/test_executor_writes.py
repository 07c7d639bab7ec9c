"""The speed layer's sink: the executors write each micro-batch, the driver writes nothing."""

from __future__ import annotations

import json
import os

from definitions.view_loading import load_views
from definitions.views import key_text
from speed_layer.job import BatchWriter

SAMPLES = "tests.unit.stores.sample_adapters"
SCHEMA = (
    "view STRING, granularity STRING, key ARRAY<STRING>, event_bucket BIGINT, ingest_bucket BIGINT, "
    "n BIGINT, total DOUBLE, sketch BINARY, estimate DOUBLE"
)


def aggregated(count: int) -> list[tuple]:
    """Rows shaped like the speed layer's aggregation, over a count, a distinct and a by_bucket view."""
    rows = []
    for i in range(count):
        rows.append(("page_views", "minute", [f"/p{i}"], 60 * i, 60 * (i + 1), i + 1, None, None, None))
        rows.append(("top_pages", "hour", [f"/p{i}"], 3600, 3660, 2 * i + 1, None, None, None))
        rows.append(("unique_visitors", "day", [f"/p{i}"], 0, 60, 9, None, bytes([i % 256, 1]), i + 0.4))
    return rows


def test_the_executors_write_the_micro_batch_and_the_driver_learns_only_the_count(spark, settings, tmp_path):
    chosen = settings.model_copy(
        update={
            "state_dir": tmp_path,
            "stores": settings.stores.model_copy(update={"realtime_writer": f"{SAMPLES}.FileRealtimeWriter"}),
        }
    )
    rows = aggregated(500)
    frame = spark.createDataFrame(rows, SCHEMA).repartition(2)

    sink = BatchWriter(chosen, load_views(chosen), shared=False)
    written = sink(frame, 7)

    records = [json.loads(line) for path in tmp_path.glob("writes-*.jsonl") for line in path.read_text().splitlines()]
    assert written == len(rows) == len(records)
    first_timestamp = sink.last_timestamp_us
    assert {r["timestamp_us"] for r in records} == {first_timestamp}, "one write timestamp per micro-batch"
    pids = {r["pid"] for r in records}
    assert os.getpid() not in pids, "the driver wrote rows itself"
    got = sorted(
        (
            r["table"],
            r["view"],
            r["granularity"],
            r["key"],
            r["event_bucket"],
            r["ingest_bucket"],
            r["value"],
            r["sketch"],
        )
        for r in records
    )
    expected = sorted(
        (
            "by_bucket" if view == "top_pages" else "by_key",
            view,
            granularity,
            key_text(key),
            event_bucket,
            ingest_bucket,
            round(estimate) if view == "unique_visitors" else n,
            sketch.hex() if view == "unique_visitors" else None,
        )
        for view, granularity, key, event_bucket, ingest_bucket, n, _total, sketch, estimate in rows
    )
    assert got == expected

    # The next micro-batch's rows carry a larger timestamp, even within the same microsecond.
    for path in tmp_path.glob("writes-*.jsonl"):
        path.unlink()
    sink.last_timestamp_us = 2**62  # a clock that stepped back must not make a later batch older
    sink(frame.limit(10), 8)
    later = {
        json.loads(line)["timestamp_us"] for p in tmp_path.glob("writes-*.jsonl") for line in p.read_text().splitlines()
    }
    assert later == {2**62 + 1}


def test_a_micro_batch_of_no_rows_or_no_partitions_writes_nothing_and_counts_zero(spark, settings, tmp_path):
    chosen = settings.model_copy(
        update={
            "state_dir": tmp_path,
            "stores": settings.stores.model_copy(update={"realtime_writer": f"{SAMPLES}.FileRealtimeWriter"}),
        }
    )
    sink = BatchWriter(chosen, load_views(chosen), shared=False)
    empty = spark.createDataFrame([], SCHEMA)
    assert sink(empty.repartition(3), 1) == 0
    no_partitions = spark.createDataFrame(spark.sparkContext.emptyRDD(), SCHEMA)
    assert no_partitions.rdd.getNumPartitions() == 0
    assert sink(no_partitions, 2) == 0
    assert sink(spark.createDataFrame(aggregated(3), SCHEMA).repartition(4), 3) == 9
    assert len(list(tmp_path.glob("writes-*.jsonl"))) >= 1
