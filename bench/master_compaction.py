"""What compacting the master dataset saves a batch run: reading a master of many small files (as the
archiver writes them) against the same rows compacted, on the running stack's HDFS.

A master of its own (under `--root`, deleted afterwards) is written by Spark's file sink, the
archiver's writer, partitioned by ingest hour: `--batches` micro-batches, each writing one file per
`--partitions` (as the archiver does per Kafka partition) in each of `--hours` finished hours, with
`--rows` records per micro-batch. Then the read a batch run makes (stores.master.read_master, its
rows counted after the de-duplication, batch_layer's first copies) is timed `--reads` times, the
master compacted (batch_layer.compaction, timed), and the same read timed again. Prints the files,
the medians and their ratio.

    .venv/bin/python bench/master_compaction.py --hours 4 --batches 180 --json /tmp/compaction.json

Needs the stack up (`lambdactl up`).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from figures import configure_logging, emit, fmt  # bench/ itself

from batch_layer.compaction import compact_master
from definitions.settings import Settings, get_settings
from ingest.archiver import master_writer, with_ingest_partitions
from stores import completeness
from stores.master import first_copies, read_master
from stores.master_compacted import HOUR_MS
from stores.webhdfs import WebHdfs

log = logging.getLogger("bench.compaction")
SOURCE = (
    "event_id STRING, event_time TIMESTAMP, user_id STRING, url STRING, event_type STRING, "
    "kafka_partition INT, kafka_offset BIGINT, ingest_time TIMESTAMP"
)


def scratch_settings(settings: Settings, root: str) -> Settings:
    archiver = settings.archiver.model_copy(
        update={"master_path": f"{root}/master", "completeness_path": f"{root}/completeness"}
    )
    return settings.model_copy(update={"archiver": archiver})


def write_input(folder: Path, batches: int, rows: int, hours: int, first_hour: int) -> None:
    """One JSON file per micro-batch: `rows` records spread over the hours, distinct ids."""
    folder.mkdir(parents=True)
    offset = 0
    for b in range(batches):
        lines = []
        for i in range(rows):
            hour = first_hour + (i % hours) * HOUR_MS
            stamp = hour + b * (HOUR_MS // batches) + i % 1000
            iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(stamp / 1000)) + f".{stamp % 1000:03d}Z"
            lines.append(
                json.dumps(
                    {
                        "event_id": f"{b}-{i}",
                        "event_time": iso,
                        "user_id": f"u{i % 500}",
                        "url": f"/p{i % 50}",
                        "event_type": "page_view",
                        "kafka_partition": i % 4,
                        "kafka_offset": offset,
                        "ingest_time": iso,
                    }
                )
            )
            offset += 1
        (folder / f"b-{b:05d}.json").write_text("\n".join(lines))


def archive(spark, settings: Settings, root: str, folder: Path, partitions: int) -> int:
    """The archiver's writer over the folder, a micro-batch per file; the last batch's id."""
    stream = (
        spark.readStream.schema(SOURCE).option("maxFilesPerTrigger", 1).json(folder.as_uri()).repartition(partitions)
    )
    checkpoint = f"{settings.hdfs.url}{root}/checkpoint"
    query = master_writer(with_ingest_partitions(stream), settings, checkpoint).trigger(availableNow=True).start()
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return query.lastProgress["batchId"]


def timed_reads(spark, settings: Settings, reads: int) -> tuple[list[float], int]:
    seconds, count = [], 0
    for _ in range(reads):
        started = time.monotonic()
        count = first_copies(read_master(spark, settings)).count()
        seconds.append(time.monotonic() - started)
    return seconds, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hours", type=int, default=4, help="finished ingest hours")
    parser.add_argument("--batches", type=int, default=180, help="archiver micro-batches over them")
    parser.add_argument("--partitions", type=int, default=4, help="files per hour and micro-batch")
    parser.add_argument("--rows", type=int, default=2000, help="records per micro-batch")
    parser.add_argument("--reads", type=int, default=3, help="timed reads before and after")
    parser.add_argument("--root", default=f"/lambda/bench-compaction-{uuid.uuid4().hex[:8]}")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure_logging()
    from definitions.spark import spark_session

    base = get_settings()
    settings = scratch_settings(base, args.root)
    spark = spark_session(base, "bench-compaction", {"spark.sql.shuffle.partitions": "4"})
    first = (int(time.time() * 1000) // HOUR_MS - args.hours - 1) * HOUR_MS
    try:
        with tempfile.TemporaryDirectory() as tmp:
            write_input(Path(tmp) / "in", args.batches, args.rows, args.hours, first)
            started = time.monotonic()
            last = archive(spark, settings, args.root, Path(tmp) / "in", args.partitions)
            log.info("archived %d micro-batches in %.1f s", args.batches, time.monotonic() - started)
        progress = completeness.PartitionProgress(10**9, first + args.hours * HOUR_MS)
        completeness.publish(settings, completeness.Completeness(last, int(time.time() * 1000), {0: progress}, 1))
        master = settings.archiver.master_path
        files_before = _files_of_hours(settings, master)
        before, rows = timed_reads(spark, settings, args.reads)
        started = time.monotonic()
        done = compact_master(settings, spark=spark, max_hours=args.hours + 1)
        compact_s = time.monotonic() - started
        files_after = _files_of_hours(settings, master)
        after, rows_after = timed_reads(spark, settings, args.reads)
    finally:
        with WebHdfs(base) as fs:
            fs.delete(args.root, recursive=True)
        spark.stop()
    if rows_after != rows:
        raise SystemExit(f"the compacted master read {rows_after} rows, not {rows}")
    result = {
        "hours": args.hours,
        "micro_batches": args.batches,
        "rows": rows,
        "data_files_before": files_before,
        "data_files_after": files_after,
        "read_s_before": [round(s, 2) for s in before],
        "read_s_after": [round(s, 2) for s in after],
        "read_median_before_s": round(statistics.median(before), 2),
        "read_median_after_s": round(statistics.median(after), 2),
        "compaction_s": round(compact_s, 1),
        "compacted_rows": done.rows,
    }
    ratio = result["read_median_before_s"] / max(result["read_median_after_s"], 1e-9)
    result["speedup"] = round(ratio, 2)
    text = (
        f"master of {fmt(rows)} rows over {args.hours} finished hours, {args.batches} micro-batches:\n"
        f"  data files {fmt(files_before)} -> {fmt(files_after)}\n"
        f"  batch read (de-duplicated count), median of {args.reads}: {result['read_median_before_s']:.2f} s -> "
        f"{result['read_median_after_s']:.2f} s ({ratio:.1f}x)\n"
        f"  compaction: {compact_s:.1f} s for {fmt(done.rows)} rows\n"
    )
    emit(result, text, args.json)


def _files_of_hours(settings: Settings, master: str) -> int:
    """Parquet files the master's reads open: in its hour folders and in `_compacted/`."""
    with WebHdfs(settings) as fs:
        return _parquet(fs, master)


def _parquet(fs: WebHdfs, path: str) -> int:
    total = 0
    for name, kind, _ in fs.entries(path):
        if kind == "DIRECTORY" and name != "_spark_metadata":
            total += _parquet(fs, f"{path}/{name}")
        elif name.endswith(".parquet"):
            total += 1
    return total


if __name__ == "__main__":
    main()
