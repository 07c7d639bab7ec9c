"""The speed layer's checkpoint on HDFS: its marker (the ingest-bucket size it was made with, and when
the speed layer first started writing realtime rows with it), and the position of its last
committed micro-batch in Spark's checkpoint layout (`commits/N`, `offsets/N`).

Realtime rows are keyed by ingest buckets of that size, so it decides which batch cutoffs the
merge can use exactly (a cutoff inside a bucket would split it between the layers). The start time
bounds how old the oldest realtime row can be (serving_layer.staleness). The file sits on HDFS
beside the checkpoint: `<checkpoint_dir>-settings.json`, `{"format": 1, "ingest_bucket_s": N,
"dedupe_window_s": W, "started_ms": T, "views": {"<view>": since_ms, ...}, "definitions": {"<view>":
fingerprint, ...}}`: `format` (absent: 1) is refused when later than this release reads;
`dedupe_window_s` is the window its de-duplication state was made with, `dedupe` the operator that
holds that state (DEDUPE_TIMERS; absent: Spark's dropDuplicatesWithinWatermark, of a checkpoint made
before the timers or under `speed.dedupe_operator` = DEDUPE_SCAN; neither reads the other's state),
`cells` how its aggregation state labels the views' cells (CELLS_SHARED: once for all views with the
same cells, definitions.views.cell_groups; absent: by each view's name), `events` the validation
limits (settings.events) the records it counted were judged by; `views` says since when the
speed layer maintains each view (stores.view_lifecycle); a marker without it is from before views
could be added to a running platform, when every view was maintained from the first start.
`definitions` says which definition of each view it maintains (View.fingerprint), and `declarations`
the definitions themselves (View.shape), by storage name: a view whose declaration changes keeps
being computed and served by the recorded definition until the new one is built
(definitions.view_versions). `realtime_origin` (true) says the realtime store records the start its
rows come from, `started_ms` (stores.realtime_origin).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from definitions.settings import Settings
from definitions.settings_store import DATA_SHAPING
from definitions.views import View


@dataclass(frozen=True)
class Marker:
    ingest_bucket_s: int
    started_ms: int | None  # None: a marker written before the start time was recorded
    views: dict[str, int] | None = None  # view → maintained since (ms); None: every view since the start
    # view → the fingerprint of the definition the speed layer maintains; None: not recorded (older marker)
    definitions: dict[str, str] | None = None
    # storage name → the definition (View.shape) maintained under it; None: not recorded (older marker)
    declarations: dict[str, dict] | None = None
    # speed.dedupe_window_s its de-duplication state was made with; None: not recorded (older marker)
    dedupe_window_s: int | None = None
    # the validation limits (settings.events) its records were judged by; None: not recorded (older marker)
    events: dict[str, int] | None = None
    # whether the realtime store records the start its rows come from (stores.realtime_origin)
    origin: bool = False
    # the de-duplication operator its state was made by: DEDUPE_TIMERS, or None (DEDUPE_SCAN)
    dedupe: str | None = None
    # how its aggregation state labels cells: CELLS_SHARED, or None (by each view's name)
    cells: str | None = None

    @property
    def shares_cells(self) -> bool:
        return self.cells == CELLS_SHARED

    def changed_limits(self, settings: Settings) -> list[str]:
        """The validation limits recorded here that `settings` give other values of, as
        `events.<name>=<recorded>` (a limit this release does not know, or one not recorded, is no change)."""
        now = event_limits(settings)
        return [f"events.{k}={v}" for k, v in sorted((self.events or {}).items()) if k in now and now[k] != v]

    def recorded(self) -> dict[str, View]:
        """The definitions the speed layer maintains, as views under their storage names (one that
        cannot be read is left out: its fingerprint alone then decides)."""
        out = {}
        for name, shape in (self.declarations or {}).items():
            try:
                out[name] = View.from_shape(name, shape)
            except ValueError:
                continue
        return out


def event_limits(settings: Settings) -> dict[str, int]:
    """The validation limits a record is judged by (the data-shaping `events.*` settings)."""
    return {
        key.split(".", 1)[1]: getattr(settings.events, key.split(".", 1)[1])
        for key in DATA_SHAPING
        if key.startswith("events.")
    }


class MarkerUnreadable(ValueError):
    """The marker file holds no marker (it is only ever written whole, so something else wrote it)."""


# The speed layer's de-duplication operators (speed_layer/job.py): event-time timers
# (speed_layer/jvm/FirstCopyWithinWindow.java) and Spark's dropDuplicatesWithinWatermark (None in
# the marker); a new checkpoint is made with the one `speed.dedupe_operator` names.
DEDUPE_TIMERS = "first-copy-timers"
DEDUPE_SCAN = "within-watermark-scan"

# A new checkpoint's aggregation state holds the cells of views that have the same ones once, under a
# label naming no view (definitions.views.cell_groups); an older one's holds each view's under its name.
CELLS_SHARED = "shared-by-fingerprint"


# The marker's layout. A later release that changes its meaning raises it: this one then refuses the
# marker rather than read part of it and rewrite it without what it does not know. Format 2 names the
# de-duplication operator (`dedupe`): a release that reads only 1 would run the other operator on the
# state and, rewriting the marker, forget which one made it. A marker without it stays format 1.
# Format 3 says the aggregation state shares cells (`cells`): a release that reads only 2 would
# label them by view and count every view from zero again in the middle of its ingest buckets.
MARKER_FORMAT = 3


def _ms_or_none(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"started_ms {str(value)[:40]!r} is not a time")
    return value


def _dedupe_or_none(value: object) -> str | None:
    if value is None or value == DEDUPE_SCAN:
        return None
    if value != DEDUPE_TIMERS:
        raise ValueError(f"dedupe {str(value)[:40]!r} is not an operator this release knows ({DEDUPE_TIMERS!r})")
    return DEDUPE_TIMERS


def _cells_or_none(value: object) -> str | None:
    if value is None:
        return None
    if value != CELLS_SHARED:
        raise ValueError(f"cells {str(value)[:40]!r} is not a labelling this release knows ({CELLS_SHARED!r})")
    return CELLS_SHARED


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
    try:
        doc = json.loads(data)
        found = doc.get("format", 1)
        if isinstance(found, bool) or not isinstance(found, int) or found > MARKER_FORMAT:
            raise MarkerUnreadable(
                f"the speed layer's checkpoint marker {marker_path(settings)} has format {str(found)[:20]}, written by "
                f"a later release (this one reads format {MARKER_FORMAT}): run that release, or remove the "
                "checkpoint and its marker"
            )
        views = doc.get("views")
        definitions = doc.get("definitions")
        declarations = doc.get("declarations")
        return Marker(
            int(doc["ingest_bucket_s"]),
            _ms_or_none(doc.get("started_ms")),
            None if views is None else {str(k): int(v) for k, v in views.items()},
            None if definitions is None else {str(k): str(v) for k, v in definitions.items()},
            None if not isinstance(declarations, dict) else {str(k): v for k, v in declarations.items()},
            None if doc.get("dedupe_window_s") is None else int(doc["dedupe_window_s"]),
            None if doc.get("events") is None else {str(k): int(v) for k, v in doc["events"].items()},
            doc.get("realtime_origin") is True,
            _dedupe_or_none(doc.get("dedupe")),
            _cells_or_none(doc.get("cells")),
        )
    except MarkerUnreadable:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError, OverflowError) as exc:
        raise MarkerUnreadable(
            f"the speed layer's checkpoint marker {marker_path(settings)} is not a marker "
            f"({type(exc).__name__}: {str(exc)[:100]}); it holds {len(data)} bytes"
        ) from None


def read_bucket_s(settings: Settings) -> int | None:
    """The ingest-bucket size the speed layer's checkpoint was made with; None before its first start."""
    marker = read_marker(settings)
    return None if marker is None else marker.ingest_bucket_s


def write_marker(
    settings: Settings,
    started_ms: int | None = None,
    views: dict[str, int] | None = None,
    definitions: dict[str, str] | None = None,
    declarations: dict[str, dict] | None = None,
    origin: bool = False,
    *,
    dedupe: str | None,
    cells: str | None,
) -> None:
    """The marker of a checkpoint made with `settings`; `dedupe` the operator its state is made by
    (None: Spark's dropDuplicatesWithinWatermark, written as a marker of format 1). No default: a
    marker written again names the operator its checkpoint already has (Marker.dedupe), or Spark
    refuses the state at the next start (STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA).
    `cells` how its aggregation state labels cells (CELLS_SHARED, or None: by view), also with no
    default: labelled otherwise, the state's groups would start again from zero."""
    from stores.webhdfs import WebHdfs

    dedupe = _dedupe_or_none(dedupe)
    cells = _cells_or_none(cells)
    doc: dict = {
        "format": MARKER_FORMAT if cells is not None else 2 if dedupe is not None else 1,
        "ingest_bucket_s": settings.ingest_bucket_s,
        "dedupe_window_s": settings.speed.dedupe_window_s,
        "events": event_limits(settings),
        "started_ms": started_ms if started_ms is not None else int(time.time() * 1000),
    }
    if views is not None:
        doc["views"] = views
    if definitions is not None:
        doc["definitions"] = definitions
    if declarations is not None:
        doc["declarations"] = declarations
    if origin:
        doc["realtime_origin"] = True
    if dedupe is not None:
        doc["dedupe"] = dedupe
    if cells is not None:
        doc["cells"] = cells
    with WebHdfs(settings) as fs:
        fs.write_whole(marker_path(settings), json.dumps(doc).encode())


def remove_checkpoint(settings: Settings) -> list[str]:
    """Delete the speed layer's marker, then its checkpoint (the speed layer must be stopped): its
    next start is a fresh one (speed_layer.job). The paths that were there. Half done (HDFS went
    away), it is done again: the speed layer refuses a checkpoint without its marker meanwhile."""
    from stores.webhdfs import WebHdfs

    removed = []
    with WebHdfs(settings) as fs:
        for path, recursive in ((marker_path(settings), False), (settings.speed.checkpoint_dir.rstrip("/"), True)):
            if fs.delete(path, recursive=recursive):
                removed.append(path)
    return removed


def remove_checkpoint_dir(settings: Settings) -> bool:
    """Delete the speed layer's checkpoint directory alone (a fresh start: nothing in it committed);
    whether it was there."""
    from stores.webhdfs import WebHdfs

    with WebHdfs(settings) as fs:
        return bool(fs.delete(settings.speed.checkpoint_dir.rstrip("/"), recursive=True))


def late_drops_path(settings: Settings) -> str:
    return f"{settings.speed.checkpoint_dir.rstrip('/')}-late-drops.json"


# How many of the latest records' ids the record of late drops keeps (a record made again is not counted again).
LATE_DROPS_IDS_KEPT = 32
LATE_DROPS_MAX_BYTES = 16_384  # the record with its ids is under 2 KiB


def record_late_drops(settings: Settings, below_ms: int, rows: int, record_id: str | None = None) -> None:
    """Rows the speed layer dropped as later than its watermark (`below_ms`, their ingest times were
    at or below it, as Spark drops them): the highest such watermark and the rows in all are kept beside the checkpoint. They
    are in no realtime row, so answers whose batch cutoff is below it are not complete. The latest
    records' ids are kept with the rows each counted: one made again (after a kill, or a write whose
    answer was lost) adds only the rows it holds beyond those."""
    from stores.webhdfs import WebHdfs

    with WebHdfs(settings) as fs:  # one client for the read and the write
        data = fs.read(late_drops_path(settings), max_bytes=LATE_DROPS_MAX_BYTES)  # HDFS's errors raise
        try:
            doc = json.loads(data) if data is not None else {}
            kept = (int(doc["below_ms"]), int(doc["rows"])) if doc else (0, 0)
            ids = {str(k): int(v) for k, v in (doc.get("ids") or {}).items()}
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError):
            kept, ids = (0, 0), {}  # not a record: started again from this one
        counted = ids.get(record_id, 0) if record_id is not None else 0
        if record_id is not None:
            ids.pop(record_id, None)  # the latest last
            ids[record_id] = max(rows, counted)
        out = {
            "below_ms": max(kept[0], below_ms),
            "rows": kept[1] + max(0, rows - counted),
            "ids": dict(list(ids.items())[-LATE_DROPS_IDS_KEPT:]),
        }
        fs.write_whole(late_drops_path(settings), json.dumps(out).encode())


def read_late_drops(settings: Settings) -> tuple[int, int] | None:
    """(the highest watermark below which the speed layer dropped rows, ms; the rows), or None."""
    from stores.webhdfs import WebHdfs

    with WebHdfs(settings) as fs:
        data = fs.read(late_drops_path(settings), max_bytes=LATE_DROPS_MAX_BYTES)
    if data is None:
        return None
    doc = json.loads(data)
    return int(doc["below_ms"]), int(doc["rows"])


def file_written_ms(settings: Settings) -> int:
    """When the marker file was last written, by HDFS's clock (its modification time)."""
    from stores.webhdfs import WebHdfs

    with WebHdfs(settings) as fs:
        return int(fs.status(marker_path(settings))["modificationTime"])


def speed_layer_committed(settings: Settings) -> bool:
    """Whether the speed layer's checkpoint has committed a micro-batch (a commit file, readable or not)."""
    from stores.webhdfs import WebHdfs

    with WebHdfs(settings) as fs:
        return any(name.isdigit() for name in fs.list(f"{settings.speed.checkpoint_dir.rstrip('/')}/commits"))


def speed_layer_position(settings: Settings) -> dict[int, int] | None:
    """Per partition of topic `events`, the next offset after the speed layer's last committed
    micro-batch (read from its checkpoint on HDFS); None before its first commit. A committed
    micro-batch has written its realtime rows (foreachBatch runs before the commit)."""
    from stores.kafka_gaps import committed_position
    from stores.webhdfs import WebHdfs

    with WebHdfs(settings) as fs:
        return committed_position(fs, settings.speed.checkpoint_dir.rstrip("/"), settings.kafka.events_topic)
