"""The speed layer's record of the ingest-bucket size its checkpoint was made with.

Realtime rows are keyed by ingest buckets of that size, so it decides which batch cutoffs the
merge can use exactly (a cutoff inside a bucket would split it between the layers). The file sits
on HDFS beside the checkpoint: `<checkpoint_dir>-settings.json`, `{"ingest_bucket_s": N}`.
"""

from __future__ import annotations

import json

from definitions.settings import Settings


def marker_path(settings: Settings) -> str:
    return f"{settings.speed.checkpoint_dir.rstrip('/')}-settings.json"


def read_bucket_s(settings: Settings) -> int | None:
    """The ingest-bucket size the speed layer's checkpoint was made with; None before its first start.
    Raises WebHdfsError (or an httpx error) when HDFS cannot be read."""
    from definitions.webhdfs import WebHdfs

    with WebHdfs(settings) as fs:
        data = fs.read(marker_path(settings))
    return None if data is None else json.loads(data).get("ingest_bucket_s")


def write_bucket_s(settings: Settings) -> None:
    from definitions.webhdfs import WebHdfs

    with WebHdfs(settings) as fs:
        fs.write(marker_path(settings), json.dumps({"ingest_bucket_s": settings.ingest_bucket_s}).encode())
