"""The merge rule, as pure functions (no stores): the heart of the platform.

answer(key, event bucket) = batch_N(key, event bucket) + Σ realtime(key, event bucket, ingest bucket)
over ingest buckets ≥ T, where N and T are the view's own batch version and the cutoff (ingest time)
its table covers: views are recomputed separately, so two views may be served at different cutoffs.
Additive views add; distinct views union their HyperLogLog sketches.

Every merged bucket keeps its provenance: the batch part and the speed part.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from definitions.views import HLL_LG_K
from serving_layer.unavailable import StoreUnavailable


@dataclass(frozen=True)
class BatchCell:
    value: int
    sketch: bytes | None = None


@dataclass(frozen=True)
class SpeedCell:
    value: int
    sketches: tuple[bytes, ...] = ()


@dataclass(frozen=True)
class MergedBucket:
    bucket: int
    value: float
    batch: float
    speed: float
    exact: bool = True


@dataclass(frozen=True)
class MergedSeries:
    buckets: list[MergedBucket] = field(default_factory=list)
    total: float = 0
    exact: bool = True


def merge_additive(
    buckets: Iterable[int], batch: Mapping[int, BatchCell], speed: Mapping[int, SpeedCell]
) -> MergedSeries:
    out = []
    for b in buckets:
        bv = batch[b].value if b in batch else 0
        sv = speed[b].value if b in speed else 0
        out.append(MergedBucket(b, bv + sv, bv, sv))
    return MergedSeries(out, sum(m.value for m in out), True)


def read_sketches(raws: Iterable[bytes], store: str) -> list:
    """The sketches a store holds; StoreUnavailable naming it when one is no sketch: its bytes are
    not trusted to the library (definitions.sketches), and its error is not a 500."""
    from definitions.sketches import BadSketch, read_sketch

    try:
        return [read_sketch(raw) for raw in raws]
    except BadSketch as exc:
        raise StoreUnavailable(store, f"a distinct view's sketch that is none: {exc}") from None


def _estimate(sketches: list, store: str) -> float:
    from definitions.sketches import BadSketch
    from definitions.sketches import union_estimate as estimate

    try:
        return estimate(sketches, HLL_LG_K)
    except BadSketch as exc:
        raise StoreUnavailable(store, f"a distinct view's sketches could not be united: {exc}") from None


def merge_distinct(
    buckets: Iterable[int], batch: Mapping[int, BatchCell], speed: Mapping[int, SpeedCell]
) -> MergedSeries:
    """Per bucket: the batch's exact count when there is no speed part, else the union of the sketches.
    The total over the range is the union of every sketch (a visitor in two buckets counts once).
    A batch cell without its sketch cannot be united with anything: StoreUnavailable, not a total
    that leaves it out."""
    out = []
    everything: list = []
    all_exact = True
    for b in buckets:
        bc, sc = batch.get(b), speed.get(b)
        if bc is not None and not bc.sketch:
            raise StoreUnavailable("hbase", f"a distinct view's cell of bucket {b} without its sketch")
        batch_sketches = read_sketches([bc.sketch], "hbase") if bc is not None and bc.sketch else []
        speed_sketches = read_sketches(sc.sketches, "cassandra") if sc else []
        sketches = batch_sketches + speed_sketches
        everything.extend(sketches)
        batch_part = float(bc.value) if bc is not None else 0.0
        if not speed_sketches:
            out.append(MergedBucket(b, batch_part, batch_part, 0.0, exact=True))
        else:
            speed_part = _estimate(speed_sketches, "cassandra")
            # The batch sketch was read; the union refusing is the speed part's.
            out.append(MergedBucket(b, _estimate(sketches, "cassandra"), batch_part, speed_part, exact=False))
            all_exact = False
    nonempty = [m for m in out if m.value]
    if len(nonempty) <= 1 and all_exact:
        total, exact = (nonempty[0].value if nonempty else 0.0), True
    else:
        store = "cassandra" if speed else "hbase"
        total, exact = (_estimate(everything, store) if everything else 0.0), False
    return MergedSeries(out, total, exact)


@dataclass(frozen=True)
class RankedTotals:
    """A batch part of a top query: each key's total, and the keys in answer order (by total,
    descending, ties by key). Kept per batch table and window, so a query merges without sorting
    every key again (merge_top)."""

    values: Mapping[str, int]
    order: tuple[str, ...]

    @classmethod
    def of(cls, values: Mapping[str, int]) -> RankedTotals:
        return cls(values, tuple(sorted(values, key=lambda k: (-values[k], k))))


def merge_top(
    batch: Mapping[str, int] | RankedTotals, speed: Mapping[str, int], limit: int
) -> list[tuple[str, int, int, int]]:
    """Top keys by merged value: (key, merged, batch part, speed part), ties broken by key.

    With the batch part ranked, only the speed part's keys and the batch's first `limit + len(speed)`
    keys can be in the answer: a key the speed part lacks keeps its batch total, and at most
    len(speed) of those first keys are the speed part's, so at least `limit` others rank above every
    later key."""
    if isinstance(batch, RankedTotals):
        values = batch.values
        keys = set(speed).union(batch.order[: limit + len(speed)])
    else:
        values = batch
        keys = set(batch) | set(speed)
    rows = [(k, values.get(k, 0) + speed.get(k, 0), values.get(k, 0), speed.get(k, 0)) for k in keys]
    rows.sort(key=lambda r: (-r[1], r[0]))
    return rows[:limit]
