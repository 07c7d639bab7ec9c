"""A switched replay's rows in the speed part of answers (stores.replays).

Once `lambdactl replay` has written a view's realtime rows again under a shadow name and switched,
the speed part of the view's answers is its shadow rows for ingest buckets in [from, split) and its
own rows for every other ingest bucket at or after the cutoff. Both parts are absolute values per
(key, event bucket, ingest bucket), so the speed part is their sum. The split is a bucket boundary
the replay chose after it began: the running speed layer wrote every row of the buckets after it
itself, and the replay read every record of the buckets before it.

With the view's cutoff at or past the split, no shadow row is read and the view's own rows are read
as if no replay had happened.
"""

from __future__ import annotations

from collections.abc import Sequence

from stores.adapters import RealtimeReaderAdapter
from stores.realtime import RealtimeCell
from stores.replays import ReplayMark


def _span(overlay: ReplayMark | None, min_ingest_bucket: int) -> tuple[int, int] | None:
    """The ingest buckets (seconds, [low, high)) read from the shadow rows, or None for none."""
    if overlay is None or not overlay.switched:
        return None
    low, high = overlay.from_ms // 1000, int(overlay.split_ms or 0) // 1000
    return (low, high) if high > min_ingest_bucket else None


def series(
    reader: RealtimeReaderAdapter,
    overlay: ReplayMark | None,
    view: str,
    granularity: str,
    key: str,
    buckets: Sequence[int],
    min_ingest_bucket: int,
    with_sketches: bool = False,
) -> dict[int, RealtimeCell]:
    span = _span(overlay, min_ingest_bucket)
    if span is None or overlay is None:
        return reader.series(view, granularity, key, buckets, min_ingest_bucket, with_sketches=with_sketches)
    own = reader.series(
        view, granularity, key, buckets, min_ingest_bucket, with_sketches=with_sketches, skip_ingest=span
    )
    replayed = reader.series(overlay.shadow, granularity, key, buckets, min_ingest_bucket, with_sketches=with_sketches)
    for bucket, cell in replayed.items():
        into = own.setdefault(bucket, RealtimeCell(sketches=[] if with_sketches else None))
        into.value += cell.value
        into.ingest_buckets += cell.ingest_buckets
        if into.sketches is not None and cell.sketches:
            into.sketches.extend(cell.sketches)
    return own


def bucket(
    reader: RealtimeReaderAdapter,
    overlay: ReplayMark | None,
    view: str,
    granularity: str,
    buckets: Sequence[int],
    min_ingest_bucket: int,
) -> dict[int, dict[str, int]]:
    span = _span(overlay, min_ingest_bucket)
    if span is None or overlay is None:
        return reader.bucket(view, granularity, buckets, min_ingest_bucket)
    own = reader.bucket(view, granularity, buckets, min_ingest_bucket, skip_ingest=span)
    for event_bucket, values in reader.bucket(overlay.shadow, granularity, buckets, min_ingest_bucket).items():
        keys = own.setdefault(event_bucket, {})
        for key, value in values.items():
            keys[key] = keys.get(key, 0) + value
    return own
