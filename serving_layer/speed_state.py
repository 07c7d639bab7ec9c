"""What the serving layer knows of the speed layer, read from HDFS and kept a minute: its checkpoint
marker (ingest-bucket size, first start, the views it maintains since when, and their definitions)
and the replay marks (stores.replays): the replays writing, and the switched ones whose rows answer
(serving_layer/replay_overlay.py). From them, each view's state (stores.view_lifecycle)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

from definitions.settings import Settings
from definitions.views import Registry
from stores.batch_views import Pointer
from stores.checkpoints import Marker
from stores.replays import ReplayMark
from stores.view_lifecycle import Lifecycle, changed_definitions, lifecycle, lifecycles

log = logging.getLogger(__name__)


def marks_trusted_s(settings: Settings) -> float:
    """A view with a switched replay is refused (HDFS unreadable) by a service that has not read the
    replay marks for this long (counted from when the read that listed them began): they are read
    again every api.speed_recheck_s. A replay deletes the rows of the replays it replaced
    replaced_rows_kept_s after its switch, so no answer reads rows already deleted."""
    return settings.api.speed_recheck_s + 5


def replaced_rows_kept_s(settings: Settings) -> float:
    """How long rows a switch replaced stay readable: an answer takes the marks when they are at
    most marks_trusted_s old, and is done within batch.cleanup_settle_s of that, or computed again
    (ServingLayer._answer); 5 s more for the clocks' steps. A slow read of the view's own rows
    outlasted the 5 s this once was, and read a shadow the replay had begun to delete.

    Asked by lambdactl, whose settings may say another api.speed_recheck_s or batch.cleanup_settle_s
    (the environment, a TOML file) than the running API's, which takes the persisted ones alone: the
    longer of the two."""
    from definitions.settings_store import running_longest

    return running_longest(settings, lambda s: marks_trusted_s(s) + s.batch.cleanup_settle_s + 5)


MARKS_WAIT_S = 2.0  # how long a query waits for a read under way before it refuses on old marks
# How soon a service that has never read the marker or the replay marks (HDFS unreadable since it
# started) tries again: it refuses every query meanwhile.
UNREAD_RETRY_S = 5.0
# How soon the record of late drops is read again when it could not be read as its mark moved.
LATE_DROPS_RETRY_S = 5.0


class SpeedState:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.recheck_s = settings.api.speed_recheck_s  # how often the marker and the replay marks are read again
        self.marks_trusted_s = marks_trusted_s(settings)
        self._marker: tuple[Marker | None, float] | None = None  # (marker, when read)
        self._marker_read = False  # a read of the marker succeeded once (None then: never started)
        self._reading = threading.Lock()  # held by the one query reading the marker and marks again
        self.replaying: dict[str, int] = {}  # view → since when a replay rebuilds it; read with the marker
        self.overlays: dict[str, ReplayMark] = {}  # view → its switched replay; read with the marker
        self.in_place: set[str] = set()  # views an older replay was rewriting in place (no shadow)
        self.unreadable: dict[str, str] = {}  # view → which mark file of it is no mark, and why
        self._marks_read_at: float | None = None  # when the last read listing the replay marks began
        self.marks_error: str | None = None  # why the last read of the replay marks failed
        self._epoch = 0  # +1 at every read_now(): a read begun before it answers for nothing after it
        self._read_epoch = -1  # the epoch of the last read completed
        self.marker_error: str | None = None  # why the last read of the marker failed
        # (the highest watermark below which the speed layer dropped rows as late, ms; the rows):
        # stores.checkpoints.record_late_drops; read with the marker, the last one kept on a failure
        self.late_drops: tuple[int, int] | None = None
        # ((when an accepted loss of records Kafka deleted before the speed layer read them was
        # recorded, ms; the records), ...): stores.kafka_gaps.recorded_losses; read with the marker, as
        # late drops; and the archiver's (records in no batch, ever)
        self.losses: tuple[tuple[int, int], ...] = ()
        self.archiver_losses: tuple[tuple[int, int], ...] = ()
        self._loss_records: dict[tuple[str, int, int], tuple[int, list]] = {}  # recorded_losses' records read
        self._late_drops_lock = threading.Lock()  # a read of the record and its assignment, one at a time
        self._late_drops_mark: int | None = None  # the late-drops mark the record was last read at
        self._late_drops_retry_at = 0.0

    def known(
        self,
        marker: Marker | None,
        replaying: dict[str, int] | None = None,
        overlays: dict[str, ReplayMark] | None = None,
        in_place: set[str] | None = None,
        unreadable: dict[str, str] | None = None,
        late_drops: tuple[int, int] | None = None,
        losses: tuple[tuple[int, int], ...] = (),
        archiver_losses: tuple[tuple[int, int], ...] = (),
    ) -> None:
        """Take `marker` (and replay marks) as just read: a service or a test that knows them."""
        self._marker = (marker, time.monotonic())
        self._marker_read = True
        self.late_drops = late_drops
        self.losses = losses
        self.archiver_losses = archiver_losses
        self.replaying = dict(replaying or {})
        self.overlays = dict(overlays or {})
        self.in_place = set(in_place or ())
        self.unreadable = dict(unreadable or {})
        self._marks_read_at, self.marks_error = time.monotonic(), None

    def overlay(self, name: str) -> ReplayMark | None:
        """The switched replay whose rows answer for part of `name`'s ingest buckets, if any. Raises
        StoreUnavailable("hdfs") when there is one but the marks were last read over marks_trusted_s
        ago: its rows may have been replaced by a later replay's and deleted."""
        from serving_layer.unavailable import StoreUnavailable

        self.marker()
        mark = self.overlays.get(name)
        if mark is not None and self._marks_old():
            # Another query may be reading them now (the first after an idle minute): wait for it.
            if self._reading.acquire(timeout=MARKS_WAIT_S):
                self._reading.release()
            mark = self.overlays.get(name)
            if mark is not None and self._marks_old():
                raise StoreUnavailable(
                    "hdfs",
                    f"the replay marks were not read for over {self.marks_trusted_s:.0f}s "
                    f"({self.marks_error or 'a read under way'}): {name}'s replayed rows may have been replaced",
                )
        return mark

    def _marks_old(self) -> bool:
        read_at = self._marks_read_at
        return read_at is None or time.monotonic() - read_at > self.marks_trusted_s

    @property
    def read_error(self) -> str | None:
        """Why the last read of the marker or of the replay marks failed (None: both were read)."""
        return self.marker_error or self.marks_error

    def read_now(self) -> Marker | None:
        """Read both again now, after any read already under way (it may have listed them before
        what the caller changed: `lambdactl views apply` and `replay` ask for this through the API).
        Other queries answer from what was read before meanwhile. On a failed read the last marker
        is kept; read_error says why."""
        self._epoch += 1
        epoch = self._epoch
        cached = self._marker
        if cached is not None:
            self._marker = (cached[0], -self.recheck_s)  # due: kept to answer from, read at the next question
        with self._reading:
            if self._read_epoch >= epoch and self._marker is not None:
                return self._marker[0]  # read after this was asked, by a query that held the lock
            return self._read(self._marker)

    def marker(self) -> Marker | None:
        """The speed layer's checkpoint marker, read again every minute; None before the speed layer's
        first start. While HDFS cannot be read, the last marker read (logged)."""
        cached = self._marker
        if cached is not None and time.monotonic() - cached[1] < self.recheck_s:
            return cached[0]
        # One query reads HDFS again; the others answer from the last read meanwhile (before the
        # first read, they wait for it).
        if not self._reading.acquire(blocking=cached is None):
            return cached[0] if cached is not None else None
        try:
            cached = self._marker
            if cached is not None and time.monotonic() - cached[1] < self.recheck_s:
                return cached[0]  # read by another query while this one waited
            return self._read(cached)
        finally:
            self._reading.release()

    def _read(self, cached: tuple[Marker | None, float] | None) -> Marker | None:
        from definitions import jobs
        from stores.checkpoints import file_written_ms, read_late_drops, read_marker
        from stores.kafka_gaps import recorded_losses

        now = time.monotonic()
        epoch = self._epoch
        try:
            marker = read_marker(self.settings)
            if marker is not None and marker.started_ms is None:
                # Written before start times were recorded: at the first start (as the speed layer
                # takes it); "never started" would keep answers missing expired rows complete.
                marker = replace(marker, started_ms=file_written_ms(self.settings))
            self.marker_error = None
            self._marker_read = True
        except Exception as exc:  # HDFS down or unreachable: not a reason to stop answering
            marker = cached[0] if cached is not None else None
            self.marker_error = f"{type(exc).__name__}: {exc}"
            log.warning(
                "cannot read the speed layer's checkpoint marker from HDFS (%s: %s); using %s",
                type(exc).__name__,
                exc,
                marker,
            )
        if (
            marker is not None
            and marker.ingest_bucket_s != self.settings.ingest_bucket_s
            and (cached is None or cached[0] != marker)
        ):
            log.warning(
                "the speed layer keys realtime rows by %ss ingest buckets, this service's setting says "
                "%ss: cutoffs are checked against the speed layer's",
                marker.ingest_bucket_s,
                self.settings.ingest_bucket_s,
            )
        if marker is not None:
            try:
                with self._late_drops_lock:
                    self.late_drops = read_late_drops(self.settings)
            except Exception as exc:  # HDFS away, or no record: the last one read stands
                log.warning("cannot read the speed layer's record of late drops: %s: %s", type(exc).__name__, exc)
            for job, attr in ((jobs.SPEED_LAYER, "losses"), (jobs.ARCHIVER, "archiver_losses")):
                try:
                    setattr(self, attr, recorded_losses(self.settings, job, self._loss_records))
                except Exception as exc:  # HDFS away: the last ones read stand
                    log.warning("cannot read the %s's loss records: %s: %s", job, type(exc).__name__, exc)
        self._read_replays(now, epoch)
        if epoch == self._epoch:  # else asked to read again meanwhile: the next question reads
            # Never read yet: what was cached says nothing, and every query is refused until a read
            # succeeds, so try again soon rather than in a minute.
            unread = not self._marker_read or self._marks_read_at is None
            self._marker = (marker, now - self.recheck_s + UNREAD_RETRY_S if unread else now)
            self._read_epoch = epoch
        return marker

    def notice_marks(self, marks: frozenset[tuple[str, int]]) -> None:
        """The realtime store's write marks, as just read (serving_layer.realtime_reads, before any
        answer reads rows under them): when the speed layer's late-drops mark moved
        (stores.realtime_writes), its record of late drops is read now, not at the next read of the
        marker. A failed read is tried again LATE_DROPS_RETRY_S later; the last record stands."""
        from stores.checkpoints import read_late_drops
        from stores.realtime_writes import late_drops_mark

        mark = late_drops_mark(marks)
        now = time.monotonic()
        if mark is None or mark == self._late_drops_mark or now < self._late_drops_retry_at:
            return
        try:
            with self._late_drops_lock:
                self.late_drops = read_late_drops(self.settings)
        except Exception as exc:  # HDFS away, or no record
            self._late_drops_retry_at = now + LATE_DROPS_RETRY_S
            log.warning("cannot read the speed layer's record of late drops: %s: %s", type(exc).__name__, exc)
            return
        self._late_drops_mark = mark

    def _read_replays(self, began: float, epoch: int) -> None:
        from stores.replays import read_replays

        try:
            claims, overlays = read_replays(self.settings)
        except Exception as exc:  # HDFS down: the last marks read (trusted marks_trusted_s)
            log.warning("cannot read the replay marks from HDFS (%s: %s)", type(exc).__name__, exc)
            self.marks_error = f"{type(exc).__name__}: {exc}"
            return
        if epoch != self._epoch:
            return  # listed before a read_now(): what they are after it is read next
        self.overlays = overlays
        self._marks_read_at, self.marks_error = began, None
        self.replaying = {view: m.from_ms for view, m in claims.items()}
        # A claim without a shadow name was left by a replay of an earlier release, which deleted
        # the view's rows before rewriting them: its answers would be short until `--resume` ends
        # (whose claim says so: stores.replays.ReplayMark.short).
        self.in_place = {view for view, m in claims.items() if m.rows_short and not m.unreadable}
        self.unreadable = {view: m.unreadable for view, m in claims.items() if m.unreadable}

    def changed(self, views: Registry, marker: Marker | None) -> list[str]:
        """Views declared differently from the definitions the speed layer maintains (refused: 409)."""
        applied = marker.definitions if marker is not None else None
        return changed_definitions({v.name: v.fingerprint for v in views}, applied)

    def lifecycle(self, name: str, pointer: Pointer | None, views: Registry) -> Lifecycle:
        """One view's state (asked on every query: it fingerprints only that view). Raises
        StoreUnavailable("hdfs") while the marker or the replay marks were never read: unread, the
        marker looks like a speed layer never started (every view serving, a changed definition
        too) and the marks like no switched replay (its rows not read): short answers as complete."""
        from serving_layer.unavailable import StoreUnavailable

        marker = self.marker()
        if not self._marker_read or self._marks_read_at is None:
            raise StoreUnavailable(
                "hdfs",
                "the speed layer's checkpoint marker and replay marks were not read since this service "
                f"started ({self.read_error or 'a read under way'}): which views it maintains is unknown",
            )
        maintained = marker.views if marker is not None else None
        applied = marker.definitions if marker is not None else None
        changed = changed_definitions({name: views[name].fingerprint}, applied)
        return lifecycle(name, maintained, pointer, replaying=self.replaying, changed=changed)

    def lifecycles(self, pointer: Pointer | None, views: Registry) -> list[Lifecycle]:
        marker = self.marker()
        maintained = marker.views if marker is not None else None
        return lifecycles(
            views.names(), maintained, pointer, replaying=self.replaying, changed=self.changed(views, marker)
        )
