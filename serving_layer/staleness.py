"""When a merged answer can no longer be exact because realtime rows it needs may have expired.

Realtime rows live `Settings.realtime_ttl_s` after they are written. An answer for a view needs
the rows of every ingest bucket at or after the view's batch cutoff T; none of them was written
before T (a row's ingest time is at or before its write time) nor before the speed layer first
started writing (the checkpoint marker's start). So the oldest row an answer needs was written no
earlier than S = max(T, start), and none can have expired while now < S + ttl. From
S + ttl − stale_margin_s on (the TTL those rows were written with: the tables record each change
of it, stores.realtime_ttl), the answer says `complete: false` and why, whatever its numbers are:
batch runs have stopped for too long and only a run that moves the cutoff makes answers whole
again.
"""

from __future__ import annotations

from dataclasses import dataclass

from definitions.settings import Settings
from definitions.times import iso_ms, iso_s
from stores.realtime_ttl import TtlChange, earliest_expiry


@dataclass(frozen=True)
class Horizon:
    ttl_s: int
    margin_s: int
    # The TTLs rows carry by when they were written, as the realtime tables record them
    # (stores.realtime_ttl.combined); () when not read: `ttl_s` for every row.
    changes: tuple[TtlChange, ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings, changes: tuple[TtlChange, ...] = ()) -> Horizon:
        return cls(settings.realtime_ttl_s, settings.speed.stale_margin_s, changes)

    def expiry(self, oldest_ms: int) -> tuple[float, int, int]:
        """stores.realtime_ttl.earliest_expiry of the rows written from `oldest_ms` on."""
        return earliest_expiry(self.changes or ((0, self.ttl_s),), oldest_ms)


def stale_reason(
    view: str, version: int | None, cutoff_ms: int, speed_started_ms: int | None, now_s: float, horizon: Horizon
) -> str | None:
    """Why answers of `view` may be missing counts, or None when every realtime row they need is
    still within its TTL. `speed_started_ms` None: the speed layer never started, no rows to lose."""
    if speed_started_ms is None:
        return None
    oldest_ms = max(cutoff_ms, speed_started_ms)
    expiry_s, ttl_s, written_ms = horizon.expiry(oldest_ms)
    if now_s < expiry_s - horizon.margin_s:
        return None
    if version is None:
        covered = f"no batch run has computed {view} yet, so its answers rest on realtime rows alone"
    else:
        covered = f"the batch view of {view} (version {version}) covers events ingested before {iso_ms(cutoff_ms)}"
    state = "have expired" if now_s >= expiry_s else "expire"
    return (
        f"stale: {covered}; realtime rows written since {iso_ms(written_ms)} {state} {ttl_s}s after "
        f"they are written (from {iso_s(expiry_s)}), so counts may be missing: run a batch "
        "(`lambdactl batch`) to make answers complete again"
    )


def late_drop_reason(
    cutoff_ms: int, drops: tuple[int, int] | None, replayed: tuple[int, int] | None = None
) -> str | None:
    """Why answers may be missing rows the speed layer dropped as later than its watermark
    (stores.checkpoints.record_late_drops: (watermark ms, rows)), or None once the batch cutoff covers
    them, or a switched replay's rows do (`replayed`: the ingest times [from, split) they answer for,
    read from Kafka with no watermark). Spark drops a row whose ingest time is at or below the
    watermark, and a cutoff takes the rows ingested before it: a cutoff on the watermark itself does
    not cover them."""
    if drops is None or cutoff_ms > drops[0]:
        return None
    if replayed is not None and replayed[0] <= cutoff_ms and replayed[1] > drops[0]:
        return None
    below_ms, rows = drops
    return (
        f"the speed layer dropped {rows:,} rows later than its watermark (ingested at or before {iso_ms(below_ms)}, "
        f"read behind an open transaction or a lagging partition): they are in no realtime row, so counts "
        f"may be missing until a batch run's cutoff passes {iso_ms(below_ms)}"
    )


def loss_reason(cutoff_ms: int, losses: tuple[tuple[int, int], ...]) -> str | None:
    """Why answers may be missing records Kafka's retention deleted before the speed layer read them
    (`lambdactl accept-loss speed-layer`; stores.kafka_gaps.recorded_losses: ((recorded_ms, records),
    ...)), or None once the batch cutoff is past when each loss was recorded."""
    open_losses = [(recorded_ms, records) for recorded_ms, records in losses if cutoff_ms < recorded_ms]
    if not open_losses:
        return None
    newest = max(recorded_ms for recorded_ms, _ in open_losses)
    records = sum(records for _, records in open_losses)
    return (
        f"Kafka's retention deleted {records:,} records before the speed layer read them (accepted with "
        f"`lambdactl accept-loss speed-layer`, the last recorded {iso_ms(newest)}): counts may be missing "
        f"them until a batch run's cutoff passes {iso_ms(newest)}"
    )


def archiver_loss_reason(first_bucket_s: int, losses: tuple[tuple[int, int], ...], max_future_s: int) -> str | None:
    """Why answers over buckets from `first_bucket_s` on may be missing records Kafka's retention
    deleted before the archiver stored them (`lambdactl accept-loss archiver`; ((recorded_ms,
    records), ...)): they are in no batch, ever. Their event times are unknown, but none is later
    than its loss's record plus `max_future_s` (events.max_future_s: what validation lets an event
    be ahead of its ingest time); None when the buckets asked for are all after that."""
    reach = [(ms, n) for ms, n in losses if first_bucket_s * 1000 < ms + max_future_s * 1000]
    if not reach:
        return None
    newest = max(ms for ms, _ in reach)
    return (
        f"Kafka's retention deleted {sum(n for _, n in reach):,} records before the archiver stored them "
        f"(accepted with `lambdactl accept-loss archiver`, the last recorded {iso_ms(newest)}): they are "
        f"in no batch, so counts of event times before {iso_ms(newest + max_future_s * 1000)} may be "
        f"missing them for good"
    )
