"""The serving layer: one merged answer per query, from HBase (batch) and Cassandra (speed).

Each query reads the pointer once and takes the queried view's own entry — the table of version N
that serves it and the cutoff T that table covers (views are recomputed separately, so each has its
own N and T) — reads that table from HBase and the view's realtime rows of ingest buckets ≥ T from
Cassandra, then merges (serving_layer.merge).
A store that cannot be read raises StoreUnavailable naming it; with `allow_partial`, an answer
without the speed part is returned instead, flagged incomplete. Never a silently wrong number.
"""

from __future__ import annotations

import logging
import threading
import time

from definitions.settings import Settings
from definitions.view_loading import load_views
from definitions.view_versions import Versions, unresolved_message
from definitions.views import Registry, View, key_text
from serving_layer import replay_overlay
from serving_layer.answers import Provenance, SeriesAnswer, TopAnswer, ViewBuilding, buckets_between
from serving_layer.batch_part import BatchPart
from serving_layer.merge import (
    SpeedCell,
    merge_additive,
    merge_distinct,
    merge_top,
)
from serving_layer.pointer_cache import PointerCache, generation
from serving_layer.pointer_floor import PointerFloor
from serving_layer.realtime_reads import RealtimeReads
from serving_layer.speed_state import SpeedState
from serving_layer.staleness import Horizon, archiver_loss_reason, late_drop_reason, loss_reason, stale_reason
from serving_layer.switching import Switched, UnknownAlias, answering_view
from serving_layer.unavailable import StoreUnavailable
from serving_layer.view_states import ViewState, view_states
from stores.batch_views import Pointer
from stores.checkpoints import Marker
from stores.pointer import NO_SOURCE, ViewSource
from stores.replays import ReplayMark
from stores.view_versions import versions_of

log = logging.getLogger(__name__)


class ServingLayer:
    """Holds the store connections (pooled, reused across requests) and answers view queries."""

    def __init__(self, settings: Settings, views: Registry | None = None, floor: PointerFloor | None = None) -> None:
        self.settings = settings
        self.declared = views if views is not None else load_views(settings)
        # The views' versions and what they were made from, replaced in one assignment: (versions,
        # (marker, the pointer's aliases, its generation, when: monotonic) or None until reload()
        # read both stores).
        self._resolved: tuple[Versions, tuple[Marker, dict[str, str], int, float] | None] = (
            versions_of(self.declared, None, None),
            None,
        )
        self._routes_stale = False  # the definitions answering the views moved since the routes were made
        self.batch = BatchPart(settings)
        self.speed = SpeedState(settings)
        self.realtime = RealtimeReads(settings, on_marks=self.speed.notice_marks)
        self._lock = threading.Lock()
        self.provenance_counts = {"batch": 0, "speed": 0}
        self.pointers = PointerCache(settings, self.batch.pointer, floor)

    # --- store access --------------------------------------------------------------------------

    def close(self) -> None:
        self.realtime.close()

    def speed_marker(self) -> Marker | None:
        """The speed layer's checkpoint marker (serving_layer.speed_state)."""
        return self.speed.marker()

    def reload(self, declared: Registry) -> None:
        """Serve the `declared` views from now on, with the marker, the replay marks and the pointer
        read again: `lambdactl views apply` calls this (through the API) after the speed layer
        restarted or a changed view switched, and `lambdactl replay` when it begins and ends. Each
        view is answered by the definition that serves it (definitions.view_versions): a changed one
        by its old definition until its new one is built and switched to."""
        self.pointers.forget()
        self.declared = declared
        try:
            pointer = self.pointer()
        except StoreUnavailable as exc:  # refused per query until it can be read (the routes stay)
            log.warning("reading the declared views' versions without the pointer: %s", exc.detail)
            pointer = None
        marker = self.speed.read_now()
        # Made again at a query once both stores were read (_refresh_versions).
        basis = (
            (marker, dict(pointer.aliases), pointer.generation, time.monotonic())
            if marker is not None and pointer is not None
            else None
        )
        self._resolved = (versions_of(declared, marker, pointer), basis)
        self._routes_stale = False

    @property
    def versions(self) -> Versions:
        return self._resolved[0]

    @property
    def views(self) -> Registry:
        """The served and the pending definitions, by storage name."""
        return self._resolved[0].maintained

    def _refresh_versions(self, pointer: Pointer | None) -> Versions:
        """The versions a query holding `pointer` is answered by, for its whole check: made again
        when the marker or the pointer's aliases differ from what the service's were made from (a
        store that could not be read at the last reload, a switch this process was not told of).
        The service keeps them unless `pointer` is older than theirs (a query still holding the
        pointer from before a switch, beside queries from after it), for api.pointer_cache_s (then
        a re-made pointer store's, as serving_layer.pointer_cache does). Never from a failed read (no marker: the
        last ones stay)."""
        versions, basis = self._resolved
        marker = self.speed.marker()
        if marker is None:
            return versions
        aliases = dict(pointer.aliases) if pointer is not None else {}
        if basis is not None and (basis[0] is marker or basis[0] == marker) and basis[1] == aliases:
            return versions
        fresh = versions_of(self.declared, marker, pointer)
        shapes = lambda versions: {n: (v.name, v.fingerprint) for n, v in versions.served.items()}  # noqa: E731
        now = time.monotonic()
        with self._lock:
            kept, basis = self._resolved
            if (
                basis is not None
                and generation(pointer) < basis[2]
                and now < basis[3] + self.settings.api.pointer_cache_s
            ):
                return fresh
            if shapes(fresh) != shapes(kept):
                self._routes_stale = True  # the API makes its routes again (take_stale_routes)
            self._resolved = (fresh, (marker, aliases, generation(pointer), now))
        return fresh

    def take_stale_routes(self) -> bool:
        """True once after the definitions answering the views moved: the caller makes the routes again."""
        with self._lock:
            stale, self._routes_stale = self._routes_stale, False
        return stale

    def _check_serving(self, view: View, pointer: Pointer | None, granularity: str) -> View:
        """The storage view answering a query of `view`'s route (serving_layer.switching), if serving."""
        versions = self._refresh_versions(pointer)
        public = versions.public(view.name)
        if public in versions.unresolved:
            raise ViewBuilding(unresolved_message([public]))
        try:
            view = answering_view(versions, view, pointer, granularity)
        except Switched as exc:
            raise ViewBuilding(str(exc)) from None
        except UnknownAlias as exc:
            raise StoreUnavailable("hbase", str(exc)) from None
        self._check_cutoff(view, pointer)
        if view.name not in versions.maintained.names():  # dropped since this query's route was matched
            raise ViewBuilding(f"view {public} is no longer declared: the API stops serving it")
        state = self.speed.lifecycle(view.name, pointer, versions.maintained)
        if state.state not in ("serving", "replaying"):  # a replay writes fresh rows, then switches
            raise ViewBuilding(state.reason)
        if state.state == "replaying" and view.name in self.speed.unreadable:
            raise ViewBuilding(
                f"view {view.name} has a replay mark that is not one ({self.speed.unreadable[view.name][:200]}): "
                f"`lambdactl replay --view {view.name} --resume` rebuilds its realtime rows and replaces it"
            )
        if state.state == "replaying" and view.name in self.speed.in_place:
            raise ViewBuilding(
                f"view {view.name} is being replayed in place by an earlier release's replay, which deleted its "
                f"realtime rows first: `lambdactl replay --view {view.name} --resume` rebuilds them"
            )
        return view

    def speed_bucket_s(self) -> int:
        """The ingest-bucket size the speed layer keys realtime rows by; this service's own setting
        before the speed layer's first start."""
        marker = self.speed_marker()
        return marker.ingest_bucket_s if marker is not None else self.settings.ingest_bucket_s

    def stale_reason(self, view: str, source: ViewSource) -> str | None:
        """Why answers of `view` may be missing counts now (serving_layer.staleness), or None; for a
        cutoff off the speed layer's ingest buckets, why its queries are refused (as listed states say)."""
        marker = self.speed_marker()
        bucket_ms = (marker.ingest_bucket_s if marker else self.settings.ingest_bucket_s) * 1000
        if source.cutoff_ms % bucket_ms:
            return (
                f"batch version {source.version} has cutoff {source.cutoff_ms} ms, not on a boundary of the speed "
                f"layer's {bucket_ms // 1000}s ingest buckets: its queries are refused (503) until a batch run"
            )
        return stale_reason(
            view,
            source.version,
            source.cutoff_ms,
            marker.started_ms if marker else None,
            self.now_s(),
            Horizon.from_settings(self.settings, self.realtime.ttl_changes()),
        )

    def pointer(self) -> Pointer | None:
        """The pointer, kept for `api.pointer_cache_s` (serving_layer.pointer_cache)."""
        return self.pointers.get()[0]

    def _answer(self, query, what: str):
        """`query(pointer)`, done within batch.cleanup_settle_s of reading that pointer from HBase: an
        answer that took longer may miss realtime rows a swap absorbed and the clean-up deleted
        meanwhile, so it is computed again on a fresh pointer, and flagged if that is slow too."""
        settle_s = self.settings.batch.cleanup_settle_s
        for attempt in (1, 2):
            pointer, read_at = self.pointers.get(fresh=attempt == 2)
            answer = query(pointer)
            took_s = time.monotonic() - read_at
            if took_s < settle_s:
                return answer
            log.warning("%s took %.1fs after its pointer was read (batch.cleanup_settle_s %gs)", what, took_s, settle_s)
        answer.provenance.incomplete(
            f"the answer took {took_s:.0f}s, longer than batch.cleanup_settle_s ({settle_s:g}s): realtime "
            "rows it needed may have been cleaned up after a batch swap meanwhile"
        )
        return answer

    def _check_cutoff(self, view: View, pointer: Pointer | None) -> None:
        """StoreUnavailable when `view`'s batch cutoff is inside one of the speed layer's ingest
        buckets: that bucket would be split between the layers, and no exact answer given (the
        other views answer)."""
        entry = pointer.entry(view.name) if pointer is not None else None
        if entry is None:
            return
        bucket_s = self.speed_bucket_s()
        if entry.cutoff_ms % (bucket_s * 1000):
            raise StoreUnavailable(
                "hbase",
                f"batch version {entry.version} of {view.name} has cutoff {entry.cutoff_ms} ms, not on a boundary "
                f"of the speed layer's {bucket_s}s ingest buckets",
            )

    # --- queries -------------------------------------------------------------------------------

    def series(
        self, view: View, keys: dict[str, str], start_s: int, end_s: int, granularity: str, allow_partial: bool = False
    ) -> SeriesAnswer:
        return self._answer(
            lambda pointer: self._series(pointer, view, keys, start_s, end_s, granularity, allow_partial), view.name
        )

    def _series(
        self,
        pointer: Pointer | None,
        view: View,
        keys: dict[str, str],
        start_s: int,
        end_s: int,
        granularity: str,
        allow_partial: bool,
    ) -> SeriesAnswer:
        view = self._check_serving(view, pointer, granularity)
        key_values = [keys[k] for k in view.keys]
        buckets = buckets_between(start_s, end_s, granularity)
        source = pointer.source(view.name) if pointer else NO_SOURCE  # this view's table and cutoff
        cutoff_ms = source.cutoff_ms
        provenance = self._provenance(view, source)
        batch = self.batch.series(source, view, granularity, key_values, buckets)
        merge = merge_additive if view.additive else merge_distinct
        overlay = None
        try:
            key = key_text(key_values)
            distinct = view.aggregation == "distinct"
            overlay = self.speed.overlay(view.name)
            realtime = self.realtime.kept(
                (
                    "series",
                    view.name,
                    granularity,
                    key,
                    buckets[0] if buckets else 0,
                    len(buckets),
                    cutoff_ms,
                    distinct,
                    overlay,
                ),
                lambda r: replay_overlay.series(
                    r, overlay, view.name, granularity, key, buckets, cutoff_ms // 1000, with_sketches=distinct
                ),
            )
            speed = {b: SpeedCell(c.value, tuple(c.sketches or ())) for b, c in realtime.items()}
            # Merged here: a speed sketch that is none, read once by the merge, is the speed part's failure.
            merged = merge(buckets, batch, speed)
        except StoreUnavailable as exc:
            if not allow_partial or exc.component == "hbase":  # the batch part's sketches: no answer
                raise
            log.warning("answering %s without the speed part: %s: %s", view.name, exc, exc.detail)
            speed = {}
            provenance.unavailable.append(exc.component)
            provenance.incomplete(f"{exc.component} cannot be read: the answer has no speed part")
            merged = merge(buckets, batch, speed)
        self._late_drops(provenance, source, buckets, overlay)
        self.provenance_counts["batch"] += len(batch)
        self.provenance_counts["speed"] += len(speed)
        return SeriesAnswer(view, dict(zip(view.keys, key_values)), granularity, merged, provenance)

    def top(
        self, view: View, start_s: int, end_s: int, granularity: str, limit: int, allow_partial: bool = False
    ) -> TopAnswer:
        return self._answer(
            lambda pointer: self._top(pointer, view, start_s, end_s, granularity, limit, allow_partial), view.name
        )

    def _top(
        self,
        pointer: Pointer | None,
        view: View,
        start_s: int,
        end_s: int,
        granularity: str,
        limit: int,
        allow_partial: bool,
    ) -> TopAnswer:
        view = self._check_serving(view, pointer, granularity)
        buckets = buckets_between(start_s, end_s, granularity)
        source = pointer.source(view.name) if pointer else NO_SOURCE  # this view's table and cutoff
        cutoff_ms = source.cutoff_ms
        provenance = self._provenance(view, source)
        batch = self.batch.top(source, view, granularity, buckets)
        speed: dict[str, int] = {}
        overlay = None
        try:
            overlay = self.speed.overlay(view.name)
            per_bucket = self.realtime.kept(
                ("bucket", view.name, granularity, buckets[0] if buckets else 0, len(buckets), cutoff_ms, overlay),
                lambda r: replay_overlay.bucket(r, overlay, view.name, granularity, buckets, cutoff_ms // 1000),
            )
            for values in per_bucket.values():
                for key, value in values.items():
                    speed[key] = speed.get(key, 0) + value
        except StoreUnavailable as exc:
            if not allow_partial:
                raise
            provenance.unavailable.append(exc.component)
            provenance.incomplete(f"{exc.component} cannot be read: the answer has no speed part")
        self._late_drops(provenance, source, buckets, overlay)
        return TopAnswer(view, granularity, start_s, end_s, merge_top(batch, speed, limit), provenance)

    def view_states(self) -> list[ViewState]:
        """Each declared view's state (serving_layer.view_states; raises StoreUnavailable when the
        pointer cannot be read)."""
        pointer = self.pointer()
        versions = self._refresh_versions(pointer)
        return view_states(versions, self.speed.lifecycles(pointer, versions.maintained), pointer, self.stale_reason)

    def _provenance(self, view: View, source: ViewSource) -> Provenance:
        provenance = Provenance(source.version, source.cutoff_ms)
        reason = self.stale_reason(view.name, source)
        if reason is not None:
            provenance.incomplete(reason)
        return provenance

    def _late_drops(
        self, provenance: Provenance, source: ViewSource, buckets: list[int], overlay: ReplayMark | None
    ) -> None:
        """Flag rows the speed layer dropped as late (unless the switched replay `overlay` read
        them), and records Kafka deleted before it or the archiver read them (accepted losses). Asked
        once the speed part was read: a read of the realtime store's marks that saw the speed layer
        mark new drops read their record first (SpeedState.notice_marks)."""
        replayed = (overlay.from_ms, overlay.split_ms) if overlay is not None and overlay.split_ms else None
        for reason in (
            late_drop_reason(source.cutoff_ms, self.speed.late_drops, replayed),
            loss_reason(source.cutoff_ms, self.speed.losses),
            archiver_loss_reason(buckets[0], self.speed.archiver_losses, self.settings.events.max_future_s)
            if buckets
            else None,
        ):
            if reason is not None:
                provenance.incomplete(reason)

    def now_s(self) -> int:
        return int(time.time())
