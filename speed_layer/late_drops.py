"""Rows the speed layer dropped as later than its watermark, recorded beside its checkpoint, where
the serving layer reads them and says which answers they are missing from (not complete)."""

from __future__ import annotations

import logging
import uuid

from definitions import jobs
from definitions.settings import Settings
from stores.progress import dropped_by_watermark, watermark_ms

log = logging.getLogger("lambda.speed")

JOB = jobs.SPEED_LAYER


# The progress file's key for late drops not recorded on HDFS yet: [below_ms, rows, record id], or None.
PENDING = "late_drops_pending"


def late_drops_recorder(settings: Settings):
    """A progress hook: rows a batch dropped as later than the watermark are recorded beside the
    checkpoint (stores.checkpoints.record_late_drops), where the serving layer reads them and says
    the answers they are missing from are not complete. Drops it could not record yet (HDFS away)
    are kept in the progress file beside the driver (PENDING) for the next start, should the job
    stop first (record_pending_late_drops). Each record moves the realtime store's late-drops mark,
    so the serving layer reads the record at once (stores.registry.late_drops_marks)."""
    from stores import checkpoints
    from stores.registry import late_drops_marks

    # [below_ms, rows, record id] not recorded yet: tried again at every batch until it is. Its id
    # makes a record made again (after a kill before the progress file said it was made) count once.
    pending: list = [0, 0, None]
    marks = late_drops_marks(settings)

    def record(progress) -> dict:
        dropped = dropped_by_watermark(progress)
        below = watermark_ms(progress) if dropped else None
        if dropped and below is not None:
            pending[0], pending[1] = max(pending[0], below), pending[1] + dropped
            pending[2] = pending[2] or uuid.uuid4().hex
        if not pending[1]:
            return {PENDING: None}
        try:
            checkpoints.record_late_drops(settings, pending[0], pending[1], record_id=pending[2])
            pending[:] = [0, 0, None]
        except Exception as exc:  # noqa: BLE001 - HDFS away: the next batch tries again
            log.warning("could not record %d rows dropped as late: %s: %s", pending[1], type(exc).__name__, exc)
            return {PENDING: list(pending)}
        if marks is not None:
            try:
                marks.mark()
            except Exception as exc:  # noqa: BLE001 - the serving layer reads the record within a minute anyway
                log.warning("could not mark the late drops recorded: %s: %s", type(exc).__name__, exc)
        return {PENDING: None}

    return record


def _mark_late_drops(settings: Settings) -> None:
    """Move the late-drops mark once; never raises (the drops are recorded already: a failure here
    must not leave them pending, to be recorded again at the next start)."""
    from stores.registry import late_drops_marks

    marks = None
    try:
        marks = late_drops_marks(settings)
        if marks is not None:
            marks.mark()
    except Exception as exc:  # noqa: BLE001 - the serving layer reads the record within a minute anyway
        log.warning("could not mark the late drops recorded: %s: %s", type(exc).__name__, exc)
    finally:
        if marks is not None:
            marks.close()


def record_pending_late_drops(settings: Settings) -> None:
    """Record the late drops the last run kept in its progress file but could not record on HDFS
    before it stopped. Raises what HDFS raises (the start fails, and the next one tries again: the
    file is only written anew once the query starts)."""
    import json

    from definitions.files import replace_text
    from stores import checkpoints
    from stores.progress import progress_path

    path = progress_path(settings, JOB)
    try:
        doc = json.loads(path.read_text())
        kept = doc.get(PENDING)
    except (OSError, ValueError, AttributeError):
        return  # no file (a first start on this machine), or one that is no record
    try:
        below_ms, rows = int(kept[0]), int(kept[1])
        record_id = str(kept[2]) if len(kept) > 2 and kept[2] is not None else None  # none: an older file's
    except (TypeError, ValueError, IndexError, KeyError, OverflowError):
        return  # None: nothing pending; or a number beyond range, no record of this job's
    if rows > 0:
        checkpoints.record_late_drops(settings, below_ms, rows, record_id=record_id)
        log.warning("recorded %d rows the last run dropped as late but could not record before it stopped", rows)
        _mark_late_drops(settings)
    # Recorded: not again, should this start stop before its progress file is written anew.
    replace_text(path, json.dumps({**doc, PENDING: None}))
