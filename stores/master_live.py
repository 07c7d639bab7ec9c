"""The master dataset's hours not compacted yet: through the archiver's file sink log, or read whole
where that log may have forgotten files.

The log lists the files of committed batches; a file of the master it does not list is a killed
batch's (its records written again by the retried batch, or cut short), or one the log forgot:
it forgets files older than `archiver.sink_log_retention_h` (at least 24 h) when it rewrites
itself, which compaction normally makes harmless by taking every hour long before. An hour holding
a file the log does not list that is older than that could be (FORGETTABLE_AFTER_MS, whatever the
setting says now: a value raised since does not bring forgotten files back) is read whole instead:
every complete data file of its folder, one row per Kafka position (a killed batch's copy of records
its retry wrote again is not counted twice: the copy kept is the one from a file the log lists, else
from the newest file, the retry's, which may carry a field the killed batch's code did not write:
not_logged); a file cut short (no Parquet footer) is left out, as no committed file is. Such an
hour costs a read of its folder, and is logged: compact the master.
Compaction reads so every hour holding a file the log does not list, whatever its age (`any_age`):
the age is told by this host's clock, and the copy it makes is what every read takes from then on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlparse

from definitions.settings import Settings
from definitions.times import iso_ms
from stores.master_compacted import HOUR_MS, hour_partition

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from stores.webhdfs import WebHdfs

log = logging.getLogger("lambda.master")

# The youngest a file the log forgot can be: archiver.sink_log_retention_h's least value, less an
# hour for the archiver's clock against this host's (the log compares its own clock with HDFS's
# modification time).
FORGETTABLE_AFTER_MS = 23 * HOUR_MS
NEVER_MS = 2**62  # a time no file is as old as FORGETTABLE_AFTER_MS before: any_age's clock
PARQUET_MAGIC = b"PAR1"  # a Parquet file's last 4 bytes: written with its footer, when the file is closed
POSITION = ["kafka_partition", "kafka_offset", "ingest_time"]  # one record of `events`, whichever batch wrote it


class DataFile(NamedTuple):
    path: str
    modified_ms: int
    size: int


def is_data_file(name: str) -> bool:
    """A file Spark reads in a partition folder: not hidden (`_…`, `.…`), Parquet by name."""
    return not name.startswith(("_", ".")) and name.endswith(".parquet")


def hours_to_read_whole(
    files: Mapping[int, Iterable[DataFile]], listed: set[str], now_ms: int, every: bool = False
) -> dict[int, list[DataFile]]:
    """Of `files` (ingest hour → its folder's data files), the hours to read whole (every one with
    `every`), each with its files the log (`listed`: paths) does not list: those to check complete."""
    out = {}
    for hour, found in sorted(files.items()):
        unlisted = [f for f in found if f.path not in listed]
        if every or any(f.modified_ms < now_ms - FORGETTABLE_AFTER_MS for f in unlisted):
            out[hour] = unlisted
    return out


def in_hours(hours: Iterable[int]) -> Column:
    """Rows of the ingest hours `hours` (their starts): one membership test, however many hours."""
    from pyspark.sql import functions as F

    keys = [f"{day.isoformat()}/{hour}" for day, hour in map(hour_partition, hours)]
    return F.concat_ws("/", F.date_format("ingest_date", "yyyy-MM-dd"), F.col("ingest_hour").cast("string")).isin(keys)


def read_live(
    spark: SparkSession,
    settings: Settings,
    fs: WebHdfs,
    hours: Mapping[int, str],
    every: bool = False,
    any_age: bool = False,
) -> tuple[DataFrame, list[int]]:
    """(the master's committed rows through the file sink's log, with those of the ingest hours of
    `hours` (start → folder path) that may hold files it forgot read whole instead; those hours).
    With `every`, every hour of `hours` is read whole; with `any_age`, every one holding a file the
    log does not list, however young (no clock tells which ones it may have forgotten)."""
    from stores.master import master_url, read_archived

    logged = read_archived(spark, master_url(settings))
    now = NEVER_MS if any_age else int(time.time() * 1000)
    # An hour's files are written in it or later: a younger hour holds no file old enough.
    old = {h: p for h, p in hours.items() if every or h < now - FORGETTABLE_AFTER_MS + HOUR_MS}
    if not old:
        return logged, []
    listed = {urlparse(url).path for url in logged.inputFiles()}
    files = {
        h: [DataFile(f"{p}/{n}", t, size) for n, t, size in fs.versions(p) if is_data_file(n)] for h, p in old.items()
    }
    whole = hours_to_read_whole(files, listed, now, every)
    if not whole:
        return logged, []
    complete = []
    for hour, unlisted in whole.items():
        cut = {f.path for f in unlisted if f.size < 12 or fs.read_tail(f.path, 4, f.size) != PARQUET_MAGIC}
        if cut:
            log.warning("left out, cut short (a killed archiver batch's; its retry wrote its records): %s", sorted(cut))
        complete += [f.path for f in files[hour] if f.path not in cut]
    if not (every or any_age):
        log.warning(
            "ingest hour(s) %s of the master dataset hold files over 23 h old that the file sink's log does not "
            "list (it forgets those older than archiver.sink_log_retention_h; or a killed batch's): read from "
            "their folders. Compact the master dataset (`lambdactl compact-master`)",
            ", ".join(map(iso_ms, whole)),
        )
    not_listed = [path for path in complete if path not in listed]
    if not not_listed:
        return logged, sorted(whole)
    url, root = master_url(settings), settings.archiver.master_path
    extra = read_archived(spark, *[f"{url}{p[len(root) :]}" for p in not_listed], base=url)
    refuse_foreign(extra)
    return logged.unionByName(not_logged(extra, logged.where(in_hours(whole)))), sorted(whole)


class ForeignMasterFiles(RuntimeError):
    """Files of the master dataset the log does not list hold rows the archiver never writes."""


def refuse_foreign(unlisted: DataFrame) -> None:
    """Raise ForeignMasterFiles naming the files of `unlisted` holding a row without its Kafka
    position, ingest time or event_id, or stamped in another ingest hour than its folder's: no
    archiver batch, killed or not, writes one, so the file was put there by hand (a backfill copied
    in). Read whole, its rows went into the master unvalidated (one per missing position: the rest
    dropped), and compaction deleted the file with the hour's originals."""
    from pyspark.sql import functions as F

    foreign = F.lit(False)
    for column in [*POSITION, "event_id"]:
        foreign = foreign | F.col(column).isNull()
    hour = F.floor(F.unix_seconds("ingest_time") / 3600)
    foreign = foreign | (hour != F.unix_date("ingest_date") * 24 + F.col("ingest_hour"))
    found = [r[0] for r in unlisted.where(foreign).select(F.col("_metadata.file_path")).distinct().limit(6).collect()]
    if found:
        named = ", ".join(sorted(found)[:5]) + (" and more" if len(found) > 5 else "")
        raise ForeignMasterFiles(
            f"the master dataset holds files the archiver did not write (rows without a Kafka position, ingest "
            f"time or event_id, or of another ingest hour than their folder's): {named}. Move them out of the "
            "master dataset; send their events through Kafka (the ingest API or a producer) instead"
        )


def not_logged(unlisted: DataFrame, logged: DataFrame) -> DataFrame:
    """The rows of `unlisted` (complete files of the master the log does not list) at Kafka
    positions no file it lists holds (`logged`: theirs, of the same hours), one per position: from
    the newest file. A record a listed file holds is taken from it, a committed batch's: a killed
    batch's copy may lack a field its retry wrote (an upgrade's first batch killed); and a killed
    batch's file comes before its retry's."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    named = unlisted.select(
        "*", F.col("_metadata.file_modification_time").alias("_at"), F.col("_metadata.file_name").alias("_file")
    )
    newest = Window.partitionBy(*POSITION).orderBy(F.col("_at").desc(), F.col("_file"))
    one = named.withColumn("_copy", F.row_number().over(newest)).where("_copy = 1").drop("_copy", "_at", "_file")
    return one.join(logged.select(*POSITION), POSITION, "left_anti")
