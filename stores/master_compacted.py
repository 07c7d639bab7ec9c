"""The master dataset's compacted hours: ingest hours the archiver has finished, rewritten as a few
large files under `<master_path>/_compacted/` (the same partition layout, the same rows).

The archiver writes up to one file per Kafka partition and ingest hour at each trigger; compaction
(batch_layer.compaction) copies every finished hour before a point into `_compacted/` and then records
that point here, `_compacted/_through.json`: every ingest hour before `through_ms` is read from
`_compacted/`, every later one from the archiver's file sink (its log, as before). Rows never move in
one read: an hour is in exactly one of the two places for a reader that took the marker before it.
The originals of compacted hours are deleted afterwards, only while no batch run may be reading
them under an older marker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING

from definitions.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import Column

    from stores.webhdfs import WebHdfs

COMPACTED_DIR = "_compacted"  # a leading underscore: Spark's listing of the master passes over it
MARKER_FILE = "_through.json"
MARKER_FORMAT = 1
MAX_MARKER_BYTES = 4096
HOUR_MS = 3_600_000


class CompactionMarkerMalformed(ValueError):
    """The compaction marker's file holds no marker (the message names the file and what is wrong)."""


@dataclass(frozen=True)
class Compacted:
    through_ms: int  # every ingest hour before this (an hour's start, epoch ms, UTC) is compacted
    compacted_ms: int  # when the marker was written
    # every compacted hour before this has had its originals deleted: a folder of such an hour in the
    # master holds only files written after that (late records), which no read takes
    deleted_before_ms: int = 0

    def to_json(self) -> bytes:
        doc = {
            "format": MARKER_FORMAT,
            "through_ms": self.through_ms,
            "compacted_ms": self.compacted_ms,
            "deleted_before_ms": self.deleted_before_ms,
        }
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, name: str) -> Compacted:
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise CompactionMarkerMalformed(f"{name}: not JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise CompactionMarkerMalformed(f"{name}: not an object")
        if doc.get("format") != MARKER_FORMAT:
            raise CompactionMarkerMalformed(
                f"{name}: format {str(doc.get('format'))[:20]!r}, this release reads {MARKER_FORMAT}"
            )
        values = {}
        for key in ("through_ms", "compacted_ms", "deleted_before_ms"):
            value = doc.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
                raise CompactionMarkerMalformed(f"{name}: {key} {str(value)[:40]!r} is not a time")
            values[key] = value
        for key in ("through_ms", "deleted_before_ms"):
            if values[key] % HOUR_MS:
                raise CompactionMarkerMalformed(f"{name}: {key} {values[key]} is not the start of an hour")
        if values["deleted_before_ms"] > values["through_ms"]:
            raise CompactionMarkerMalformed(f"{name}: deleted_before_ms is after through_ms")
        return cls(**values)


def compacted_path(settings: Settings) -> str:
    return f"{settings.archiver.master_path}/{COMPACTED_DIR}"


def marker_path(settings: Settings) -> str:
    return f"{compacted_path(settings)}/{MARKER_FILE}"


def day_folders(fs: WebHdfs, path: str) -> list[str]:
    """The names of the archiver's day folders (`ingest_date=…`) in the folder at `path`."""
    return [n for n in fs.list(path) if n.startswith("ingest_date=")]


def read_compacted(fs: WebHdfs, settings: Settings) -> Compacted | None:
    """The compaction marker, or None when no hour has been compacted. A file there that holds no
    marker fails (CompactionMarkerMalformed), and so does a missing one while compacted hours are
    there: read as none, the compacted hours would be read from originals that may be gone."""
    name = marker_path(settings)
    data = fs.read(name, max_bytes=MAX_MARKER_BYTES)
    if data is not None:
        return Compacted.from_json(data, name)
    if day_folders(fs, compacted_path(settings)):
        raise CompactionMarkerMalformed(
            f"{name} is missing, but {compacted_path(settings)} holds compacted hours whose originals may be "
            "gone: restore it (docs/operations.md, 'Compacting the master dataset')"
        )
    return None


def write_compacted(fs: WebHdfs, settings: Settings, marker: Compacted) -> None:
    """Replace the marker whole (written beside it, then renamed over it)."""
    fs.write_whole(marker_path(settings), marker.to_json())


def hour_partition(hour_ms: int) -> tuple[date, int]:
    """The archiver's partition values (`ingest_date`, `ingest_hour`, UTC) of the hour starting at `hour_ms`."""
    moment = datetime.fromtimestamp(hour_ms / 1000, UTC)
    return moment.date(), moment.hour


def hour_dir(hour_ms: int) -> str:
    day, hour = hour_partition(hour_ms)
    return f"ingest_date={day.isoformat()}/ingest_hour={hour}"


def hour_of_dir(day_name: str, hour_name: str) -> int | None:
    """The start (epoch ms) of the hour a partition folder `ingest_date=D/ingest_hour=H` holds, or
    None for a folder that is no partition of the archiver's."""
    if not (day_name.startswith("ingest_date=") and hour_name.startswith("ingest_hour=")):
        return None
    try:
        day = date.fromisoformat(day_name.removeprefix("ingest_date="))
        hour = int(hour_name.removeprefix("ingest_hour="))
    except ValueError:
        return None
    if not 0 <= hour < 24 or hour_name != f"ingest_hour={hour}" or day_name != f"ingest_date={day.isoformat()}":
        return None
    return int(datetime(day.year, day.month, day.day, hour, tzinfo=UTC).timestamp() * 1000)


def before_hour(hour_ms: int) -> Column:
    """A filter on the partition columns: rows of ingest hours before the one starting at `hour_ms`
    (Spark prunes the files of other hours without opening them)."""
    from pyspark.sql import functions as F

    day, hour = hour_partition(hour_ms)
    return (F.col("ingest_date") < F.lit(day)) | ((F.col("ingest_date") == F.lit(day)) & (F.col("ingest_hour") < hour))


def archived_hours(fs: WebHdfs, settings: Settings) -> dict[int, str]:
    """The archiver's partition folders in the master dataset: hour start (epoch ms) → folder path."""
    root = settings.archiver.master_path
    found = {}
    for day_name in day_folders(fs, root):
        for hour_name in fs.list(f"{root}/{day_name}"):
            hour_ms = hour_of_dir(day_name, hour_name)
            if hour_ms is not None:
                found[hour_ms] = f"{root}/{day_name}/{hour_name}"
    return found
