"""Reading the master dataset: every valid record Kafka received, exactly once, never modified."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from definitions.events import FIELDS
from definitions.settings import Settings
from stores.master_compacted import HOUR_MS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from stores.webhdfs import WebHdfs


def master_url(settings: Settings) -> str:
    return f"{settings.hdfs.url}{settings.archiver.master_path}"


# Spark types of the archived columns: the contract's fields, the record's source position, and the
# partition columns the archiver derives from the ingest time.
_TYPES = {"string": "STRING", "timestamp": "TIMESTAMP", "int": "INT"}
SINK_LOG_FILE = re.compile(r"(\d+)(?:\.compact)?")  # the file sink's log: `N`, or `N.compact`
SOURCE_DDL = "kafka_partition INT, kafka_offset BIGINT, ingest_time TIMESTAMP, ingest_date DATE, ingest_hour INT"


def master_ddl() -> str:
    """The master dataset's schema, from the event contract. A field added by a later schema_version
    is in it; files archived before that field existed lack the column and read it as null, so old
    files are never rewritten."""
    return ", ".join([*(f"{f.name} {_TYPES[f.kind]}" for f in FIELDS), SOURCE_DDL])


def first_copies(events: DataFrame) -> DataFrame:
    """One row per event_id: the first archived copy (by ingest time, then Kafka partition and
    offset). The batch layer reads the master dataset this way; a replay reads Kafka the same way."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    first = Window.partitionBy("event_id").orderBy("ingest_time", "kafka_partition", "kafka_offset")
    return events.withColumn("_copy", F.row_number().over(first)).where("_copy = 1").drop("_copy")


class MasterHoursUnlisted(RuntimeError):
    """Ingest hours not compacted yet whose files the file sink's log no longer lists all of."""

    def __init__(self, settings: Settings, hours: list[int]) -> None:
        from definitions.times import iso_ms

        self.hours = hours
        super().__init__(
            f"ingest hour(s) {', '.join(map(iso_ms, hours[:5]))} of the master dataset hold files the archiver's "
            "file sink log no longer lists (it forgets files older than archiver.sink_log_retention_h = "
            f"{settings.archiver.sink_log_retention_h} h) and are not compacted: read through the log they would "
            "miss records. Run `lambdactl compact-master`, which reads them from their folders (docs/operations.md)"
        )


def unlisted_hours(
    hours: Mapping[int, str],
    names_in: Callable[[str], list[str]],
    listed: Iterable[str],
    now_ms: int,
    retention_ms: int,
) -> list[int]:
    """The ingest hours of `hours` (start → folder path) old enough for the file sink's log to have
    forgotten files of (`retention_ms`, an hour's leeway for clocks) whose folder (`names_in`: its
    files' names) holds a data file the log (`listed`: file URLs or paths) does not list. Younger
    unlisted files are a killed batch's, which a retried one wrote again."""
    from urllib.parse import urlparse

    paths = {urlparse(url).path for url in listed}
    old = [h for h in sorted(hours) if h < now_ms - retention_ms + HOUR_MS]
    return [h for h in old if any(f"{hours[h]}/{n}" not in paths for n in names_in(hours[h]) if n.endswith(".parquet"))]


def read_unlisted(spark: SparkSession, settings: Settings, folders: list[str]) -> DataFrame:
    """The committed records of ingest hour folders (paths) read whole, not through the file sink's
    log: a killed batch's copy of records a retried batch archived again is dropped (one row per
    Kafka position); a file that cannot be read (a killed batch's, cut short) fails the read, naming it."""
    url = master_url(settings)
    root = settings.archiver.master_path
    return read_archived(spark, *[f"{url}{p[len(root) :]}" for p in folders], base=url).dropDuplicates(
        ["kafka_partition", "kafka_offset"]
    )


def read_master(spark: SparkSession, settings: Settings) -> DataFrame:
    """The committed master dataset (the file sink's log hides files of unfinished batches): the
    compacted ingest hours from `_compacted/`, every later one through the file sink's log
    (stores.master_compacted). A compaction marker that cannot be read fails the read, naming it; so
    do hours the log forgot files of before they were compacted (MasterHoursUnlisted)."""
    from stores.master_compacted import archived_hours, before_hour, compacted_path, day_folders, read_compacted
    from stores.webhdfs import WebHdfs

    live = read_archived(spark, master_url(settings))
    with WebHdfs(settings) as fs:
        compacted = read_compacted(fs, settings)
        days = day_folders(fs, compacted_path(settings)) if compacted is not None else []
        after = compacted.through_ms if compacted is not None else 0
        hours = {h: p for h, p in archived_hours(fs, settings).items() if h >= after}
        retention_ms = settings.archiver.sink_log_retention_h * HOUR_MS
        gone = unlisted_hours(hours, fs.list, live.inputFiles(), int(time.time() * 1000), retention_ms)
    if gone:
        raise MasterHoursUnlisted(settings, gone)
    if compacted is None:
        return live
    older = before_hour(compacted.through_ms)
    if not days:  # the hours before the marker held no record
        return live.where(~older)
    copies = read_days(spark, f"{settings.hdfs.url}{compacted_path(settings)}", days)
    return copies.where(older).unionByName(live.where(~older))


def read_archived(spark: SparkSession, *urls: str, base: str | None = None) -> DataFrame:
    """Archived events at `url` with the contract's schema (not one inferred from some file's footer,
    which may predate a field). A file missing or damaged fails the read, naming it, whatever a
    session's options say: never counted as no events. `base`: the folder whose partition folders
    `urls` are."""
    reader = spark.read.schema(master_ddl()).option("ignoreMissingFiles", "false").option("ignoreCorruptFiles", "false")
    if base is not None:
        reader = reader.option("basePath", base)
    return reader.parquet(*urls)


def read_days(spark: SparkSession, root: str, days: list[str]) -> DataFrame:
    """The archived events in the day folders `days` of `root`, by name: Spark would pass over a
    folder such as `_compacted` read whole. `days` must not be empty."""
    return read_archived(spark, *[f"{root}/{day}" for day in days], base=root)


def last_archived_batch(fs: WebHdfs, settings: Settings) -> int | None:
    """The id of the last batch the archiver's file sink committed to the master dataset (its log,
    `_spark_metadata`: `N` and compacted `N.compact` files), or None before the first."""
    names = fs.list(f"{settings.archiver.master_path}/_spark_metadata")
    # Only the log's own files: a commit killed part-way leaves Spark's `.N.<uuid>.tmp` beside them.
    ids = [int(found.group(1)) for found in map(SINK_LOG_FILE.fullmatch, names) if found]
    return max(ids, default=None)


def last_archived(settings: Settings) -> int | None:
    """last_archived_batch, on a connection of its own."""
    from stores.webhdfs import WebHdfs

    with WebHdfs(settings) as fs:
        return last_archived_batch(fs, settings)
