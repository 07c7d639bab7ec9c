"""What the serving layer knows of the speed layer, read from HDFS and kept a minute: its checkpoint
marker (ingest-bucket size, first start, the views it maintains since when, and their definitions)
and the replay marks (stores.replays): the replays writing, and the switched ones whose rows answer
(serving_layer/replay_overlay.py). From them, each view's state (stores.view_lifecycle)."""

from __future__ import annotations

import logging
import threading
import time

from definitions.settings import Settings
from definitions.views import Registry
from stores.batch_views import Pointer
from stores.checkpoints import Marker
from stores.replays import ReplayMark
from stores.view_lifecycle import Lifecycle, changed_definitions, lifecycle, lifecycles

log = logging.getLogger(__name__)

RECHECK_S = 60.0  # how often the marker and the replay marks are read again


class SpeedState:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._marker: tuple[Marker | None, float] | None = None  # (marker, when read)
        self._reading = threading.Lock()  # held by the one query reading the marker and marks again
        self.replaying: dict[str, int] = {}  # view → since when a replay rebuilds it; read with the marker
        self.overlays: dict[str, ReplayMark] = {}  # view → its switched replay; read with the marker
        self.in_place: set[str] = set()  # views an older replay was rewriting in place (no shadow)
        self.unreadable: dict[str, str] = {}  # view → which mark file of it is no mark, and why

    def known(
        self,
        marker: Marker | None,
        replaying: dict[str, int] | None = None,
        overlays: dict[str, ReplayMark] | None = None,
        in_place: set[str] | None = None,
        unreadable: dict[str, str] | None = None,
    ) -> None:
        """Take `marker` (and replay marks) as just read: a service or a test that knows them."""
        self._marker = (marker, time.monotonic())
        self.replaying = dict(replaying or {})
        self.overlays = dict(overlays or {})
        self.in_place = set(in_place or ())
        self.unreadable = dict(unreadable or {})

    def overlay(self, name: str) -> ReplayMark | None:
        """The switched replay whose rows answer for part of `name`'s ingest buckets, if any."""
        self.marker()
        return self.overlays.get(name)

    def forget(self) -> None:
        """Read both again at the next question (`lambdactl views apply` and `replay` ask for it)."""
        self._marker = None

    def marker(self) -> Marker | None:
        """The speed layer's checkpoint marker, read again every minute; None before the speed layer's
        first start. While HDFS cannot be read, the last marker read (logged)."""
        cached = self._marker
        if cached is not None and time.monotonic() - cached[1] < RECHECK_S:
            return cached[0]
        # One query reads HDFS again; the others answer from the last read meanwhile (before the
        # first read, they wait for it).
        if not self._reading.acquire(blocking=cached is None):
            return cached[0] if cached is not None else None
        try:
            cached = self._marker
            if cached is not None and time.monotonic() - cached[1] < RECHECK_S:
                return cached[0]  # read by another query while this one waited
            return self._read(cached)
        finally:
            self._reading.release()

    def _read(self, cached: tuple[Marker | None, float] | None) -> Marker | None:
        from stores.checkpoints import read_marker

        now = time.monotonic()
        try:
            marker = read_marker(self.settings)
        except Exception as exc:  # HDFS down or unreachable: not a reason to stop answering
            marker = cached[0] if cached is not None else None
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
        self._marker = (marker, now)
        self._read_replays()
        return marker

    def _read_replays(self) -> None:
        from stores.replays import read_replays

        try:
            claims, self.overlays = read_replays(self.settings)
        except Exception as exc:  # HDFS down: the last marks read
            log.warning("cannot read the replay marks from HDFS (%s: %s)", type(exc).__name__, exc)
            return
        self.replaying = {view: m.from_ms for view, m in claims.items()}
        # A claim without a shadow name was left by a replay of an earlier release, which deleted
        # the view's rows before rewriting them: its answers would be short until `--resume` ends.
        self.in_place = {view for view, m in claims.items() if not m.shadow}
        self.unreadable = {view: m.unreadable for view, m in claims.items() if m.unreadable}

    def changed(self, views: Registry, marker: Marker | None) -> list[str]:
        """Views declared differently from the definitions the speed layer maintains (refused: 409)."""
        applied = marker.definitions if marker is not None else None
        return changed_definitions({v.name: v.fingerprint for v in views}, applied)

    def lifecycle(self, name: str, pointer: Pointer | None, views: Registry) -> Lifecycle:
        """One view's state (asked on every query: it fingerprints only that view)."""
        marker = self.marker()
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
