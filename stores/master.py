"""Reading the master dataset: every valid record Kafka received, exactly once, never modified."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from definitions.events import fields_ddl
from definitions.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from stores.webhdfs import WebHdfs


def master_url(settings: Settings) -> str:
    return f"{settings.hdfs.url}{settings.archiver.master_path}"


# The archived columns beside the contract's fields: the record's source position, and the partition
# columns the archiver derives from the ingest time.
SINK_LOG_FILE = re.compile(r"(\d+)(?:\.compact)?")  # the file sink's log: `N`, or `N.compact`
SOURCE_DDL = "kafka_partition INT, kafka_offset BIGINT, ingest_time TIMESTAMP, ingest_date DATE, ingest_hour INT"


def master_ddl() -> str:
    """The master dataset's schema, from the event contract. A field added by a later schema_version
    is in it; files archived before that field existed lack the column and read it as null, so old
    files are never rewritten."""
    return f"{fields_ddl()}, {SOURCE_DDL}"


def first_copies(events: DataFrame) -> DataFrame:
    """One row per event_id: the first archived copy (by ingest time, then Kafka partition and
    offset). The batch layer reads the master dataset this way; a replay reads Kafka the same way."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    first = Window.partitionBy("event_id").orderBy("ingest_time", "kafka_partition", "kafka_offset")
    return events.withColumn("_copy", F.row_number().over(first)).where("_copy = 1").drop("_copy")


LISTINGS = 3  # listings of the master a read makes at most while compactions move its marker


def _through(marker) -> int:
    """The hour the master is compacted up to (0: none)."""
    return marker.through_ms if marker is not None else 0


class MasterCompactedMeanwhile(RuntimeError):
    """Every listing of the master dataset a read made was overtaken by a compaction."""


def read_master(spark: SparkSession, settings: Settings) -> DataFrame:
    """The committed master dataset (the file sink's log hides files of unfinished batches): the
    compacted ingest hours from `_compacted/`, every later one through the file sink's log, or read
    whole where the log may have forgotten files (stores.master_compacted, stores.master_live). A
    compaction marker that cannot be read fails the read, naming it; one that moved while the read
    listed the master has it listed again."""
    from stores import master_live
    from stores.master_compacted import archived_hours, before_hour, compacted_path, day_folders, read_compacted
    from stores.webhdfs import WebHdfs

    with WebHdfs(settings) as fs:
        for _ in range(LISTINGS):
            compacted = read_compacted(fs, settings)
            days = day_folders(fs, compacted_path(settings)) if compacted is not None else []
            after = _through(compacted)
            hours = {h: p for h, p in archived_hours(fs, settings).items() if h >= after}
            live, _ = master_live.read_live(spark, settings, fs, hours)
            # A compaction meanwhile moves its marker before it deletes the hours' folders: one read
            # as missing would leave out the files of it the log forgot, with no error. Listed again.
            # Only a move past the hours read counts (deleting originals rewrites the marker too).
            if _through(read_compacted(fs, settings)) == after:
                break
        else:
            raise MasterCompactedMeanwhile(
                f"the master dataset was compacted while it was listed, {LISTINGS} times in a row: run again"
            )
    if compacted is None:
        return live
    _check_not_ahead(settings, compacted.through_ms)
    older = before_hour(compacted.through_ms)
    if not days:  # the hours before the marker held no record
        return live.where(~older)
    copies = read_days(spark, f"{settings.hdfs.url}{compacted_path(settings)}", days)
    return copies.where(older).unionByName(live.where(~older))


def _check_not_ahead(settings: Settings, through_ms: int) -> None:
    """Refuse a compaction marker past the hours the archiver finished (compaction never moves it
    there): a marker restored by hand with a wrong time, or a master rebuilt without its `_compacted`
    folder. Trusted, every read took the hours before it from `_compacted/`, where they are not, and
    left their records out with no error."""
    from definitions.times import iso_ms
    from stores import completeness
    from stores.master_compacted import HOUR_MS, CompactionMarkerMalformed, marker_path

    marker = completeness.latest(settings)
    covered = marker.complete_before_ms if marker is not None else None
    if covered is not None and through_ms > covered - covered % HOUR_MS:
        raise CompactionMarkerMalformed(
            f"{marker_path(settings)}: says the master is compacted up to {iso_ms(through_ms)}, past the hours the "
            f"archiver's newest completeness marker says are finished (before {iso_ms(covered - covered % HOUR_MS)}), "
            "where compaction never moves it: the hours between would be read from _compacted/ alone. Either this "
            "marker is wrong (restored by hand: restore the one written with that folder), or the completeness "
            f"went back (the archiver's checkpoint reset, a master rebuilt without _compacted/, a broken newest "
            f"marker in {settings.archiver.completeness_path}): see docs/operations.md"
        )


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
