"""The speed layer's checkpoint marker: the ingest-bucket size it was made with, and when
the speed layer first started writing realtime rows with it.

Realtime rows are keyed by ingest buckets of that size, so it decides which batch cutoffs the
merge can use exactly (a cutoff inside a bucket would split it between the layers). The start time
bounds how old the oldest realtime row can be (serving_layer.staleness). The file sits on HDFS
beside the checkpoint: `<checkpoint_dir>-settings.json`, `{"ingest_bucket_s": N, "started_ms": T}`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from definitions.settings import Settings


@dataclass(frozen=True)
class Marker:
    ingest_bucket_s: int
    started_ms: int | None  # None: a marker written before the start time was recorded


def marker_path(settings: Settings) -> str:
    return f"{settings.speed.checkpoint_dir.rstrip('/')}-settings.json"


def read_marker(settings: Settings) -> Marker | None:
    """The speed layer's checkpoint marker; None before its first start.
    Raises WebHdfsError when HDFS cannot be read."""
    from stores.webhdfs import WebHdfs

    with WebHdfs(settings) as fs:
        data = fs.read(marker_path(settings))
    if data is None:
        return None
    doc = json.loads(data)
    return Marker(int(doc["ingest_bucket_s"]), doc.get("started_ms"))


def read_bucket_s(settings: Settings) -> int | None:
    """The ingest-bucket size the speed layer's checkpoint was made with; None before its first start."""
    marker = read_marker(settings)
    return None if marker is None else marker.ingest_bucket_s


def write_marker(settings: Settings, started_ms: int | None = None) -> None:
    from stores.webhdfs import WebHdfs

    doc = {
        "ingest_bucket_s": settings.ingest_bucket_s,
        "started_ms": started_ms if started_ms is not None else int(time.time() * 1000),
    }
    with WebHdfs(settings) as fs:
        fs.write(marker_path(settings), json.dumps(doc).encode())


def file_written_ms(settings: Settings) -> int:
    """When the marker file was last written, by HDFS's clock (its modification time)."""
    from stores.webhdfs import WebHdfs

    with WebHdfs(settings) as fs:
        return int(fs.status(marker_path(settings))["modificationTime"])
