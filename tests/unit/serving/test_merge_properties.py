"""Store laws of the merge, on random workloads (no services): for random events, random lateness,
duplicates and random cutoffs, batch-below-T + realtime-at-or-after-T == the truth."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
from datasketches import hll_sketch, tgt_hll_type
from hypothesis import example, given, settings
from hypothesis import strategies as st

from definitions.views import HLL_LG_K
from serving_layer.merge import BatchCell, SpeedCell, merge_additive, merge_distinct, merge_top

BUCKET = 3_600  # event-time bucket (s)
INGEST = 60  # ingest bucket (s)


def random_events(rng: random.Random, n: int) -> list[dict]:
    """Events in ingest order; some hours or days late; some re-sent (same id, later ingest)."""
    events, now = [], 1_800_000_000
    for i in range(n):
        now += rng.randint(0, 20)
        late = rng.random() < 0.3
        event_time = now - (rng.randint(3_600, 3 * 86_400) if late else rng.randint(0, 5))
        events.append({"id": f"e{i}", "user": f"u{rng.randint(0, 60)}", "event_time": event_time, "ingest": now})
        if rng.random() < 0.1:  # a duplicate re-sent a little later (within the speed layer's window)
            events.append({**events[-1], "ingest": now + rng.randint(0, 30)})
    events.sort(key=lambda e: e["ingest"])
    return events


def first_copies(events: list[dict]) -> list[dict]:
    seen, out = set(), []
    for e in events:
        if e["id"] not in seen:
            seen.add(e["id"])
            out.append(e)
    return out


def layers(events: list[dict], cutoff: int):
    """What the batch layer (exact, ingest < T) and the speed layer (per ingest bucket) would hold."""
    distinct = first_copies(events)
    batch_count: dict[int, int] = defaultdict(int)
    batch_users: dict[int, set] = defaultdict(set)
    speed_count: dict[tuple[int, int], int] = defaultdict(int)
    speed_users: dict[tuple[int, int], set] = defaultdict(set)
    for e in distinct:
        eb = e["event_time"] // BUCKET * BUCKET
        if e["ingest"] < cutoff:
            batch_count[eb] += 1
            batch_users[eb].add(e["user"])
        ib = e["ingest"] // INGEST * INGEST
        speed_count[(eb, ib)] += 1  # the speed layer holds every ingest bucket ...
        speed_users[(eb, ib)].add(e["user"])
    return distinct, batch_count, batch_users, speed_count, speed_users


def sketch_of(users) -> bytes:
    s = hll_sketch(HLL_LG_K, tgt_hll_type.HLL_8)  # as Spark writes them
    for u in users:
        s.update(u)
    return s.serialize_compact()


@pytest.mark.parametrize("seed", range(40))
def test_additive_merge_equals_truth_at_any_cutoff(seed):
    rng = random.Random(seed)
    events = random_events(rng, rng.randint(1, 400))
    span = (events[0]["ingest"], events[-1]["ingest"] + INGEST)
    cutoff = rng.randint(*span) // INGEST * INGEST  # cutoffs fall on ingest-bucket boundaries
    distinct, batch_count, _, speed_count, _ = layers(events, cutoff)
    batch = {b: BatchCell(v) for b, v in batch_count.items()}
    speed: dict[int, int] = defaultdict(int)
    for (eb, ib), v in speed_count.items():
        if ib >= cutoff:  # ... but the merge reads only ingest buckets >= T
            speed[eb] += v
    buckets = sorted({e["event_time"] // BUCKET * BUCKET for e in distinct})
    merged = merge_additive(buckets, batch, {b: SpeedCell(v) for b, v in speed.items()})
    truth: dict[int, int] = defaultdict(int)
    for e in distinct:
        truth[e["event_time"] // BUCKET * BUCKET] += 1
    assert {m.bucket: m.value for m in merged.buckets if m.value} == dict(truth)
    assert merged.total == len(distinct)


@pytest.mark.parametrize("seed", range(20))
def test_distinct_merge_is_within_the_hll_bound(seed):
    rng = random.Random(1000 + seed)
    events = random_events(rng, rng.randint(50, 600))
    cutoff = rng.randint(events[0]["ingest"], events[-1]["ingest"]) // INGEST * INGEST
    distinct, batch_count, batch_users, speed_count, speed_users = layers(events, cutoff)
    batch = {b: BatchCell(len(u), sketch_of(u)) for b, u in batch_users.items()}
    speed: dict[int, list[bytes]] = defaultdict(list)
    for (eb, ib), users in speed_users.items():
        if ib >= cutoff:
            speed[eb].append(sketch_of(users))
    buckets = sorted({e["event_time"] // BUCKET * BUCKET for e in distinct})
    merged = merge_distinct(buckets, batch, {b: SpeedCell(0, tuple(s)) for b, s in speed.items()})
    truth: dict[int, set] = defaultdict(set)
    for e in distinct:
        truth[e["event_time"] // BUCKET * BUCKET].add(e["user"])
    for m in merged.buckets:
        exact = len(truth.get(m.bucket, ()))
        if m.exact:
            assert m.value == exact
        else:
            assert abs(m.value - exact) <= max(1.0, 3 * 0.0163 * exact)
    everyone = {e["user"] for e in distinct}
    assert abs(merged.total - len(everyone)) <= max(1.0, 3 * 0.0163 * len(everyone))


def test_batch_only_buckets_are_exact_and_a_speed_part_makes_them_estimates():
    merged = merge_distinct([0, 3600], {0: BatchCell(5, sketch_of("abcde"))}, {3600: SpeedCell(0, (sketch_of("xy"),))})
    assert merged.buckets[0].exact and merged.buckets[0].value == 5
    assert not merged.buckets[1].exact and round(merged.buckets[1].value) == 2


def test_top_merges_both_parts_and_breaks_ties_by_key():
    rows = merge_top({"/a": 5, "/b": 3}, {"/b": 2, "/c": 9}, limit=3)
    assert rows == [("/c", 9, 0, 9), ("/a", 5, 5, 0), ("/b", 5, 3, 2)]


@settings(max_examples=500, deadline=None, database=None)
@example({"/a": 5, "/b": 4}, {"/a": -3}, 1)  # the answer lies beyond the batch's first `limit` keys
@given(
    st.dictionaries(st.sampled_from([f"/{i}" for i in range(10)]), st.integers(0, 6), max_size=10),
    st.dictionaries(st.sampled_from([f"/{i}" for i in range(12)]), st.integers(-6, 6), max_size=6),
    st.integers(1, 6),
)
def test_a_ranked_batch_part_gives_the_same_top_as_merging_every_key(batch, speed, limit):
    """merge_top reads only the ranked batch's first limit + len(speed) keys: the answer, ties
    and negative speed parts (a replay's correction) included, is the full merge's."""
    from serving_layer.merge import RankedTotals

    assert merge_top(RankedTotals.of(batch), speed, limit) == merge_top(batch, speed, limit)


def test_a_distinct_cell_without_or_with_a_broken_sketch_is_a_store_that_cannot_be_read():
    """A batch cell without its sketch was left out of the total (two such cells: total 0), and the
    library's errors on broken bytes were 500s: both are the store's fault, named, and no answer."""
    from serving_layer.unavailable import StoreUnavailable

    broken = bytearray(sketch_of("abc"))
    broken[4] = 34  # a coupon array of 2^34 entries: ~20 GB if the library were given it
    cases = [
        ({0: BatchCell(100), 3600: BatchCell(50)}, {}, "hbase"),
        ({0: BatchCell(100)}, {0: SpeedCell(0, (sketch_of("xy"),))}, "hbase"),
        ({0: BatchCell(2, bytes(broken))}, {}, "hbase"),
        ({0: BatchCell(5, sketch_of("abcde"))}, {0: SpeedCell(0, (bytes(broken),))}, "cassandra"),
        ({}, {0: SpeedCell(0, (b"\x00" * 40,))}, "cassandra"),
    ]
    for batch, speed, store in cases:
        with pytest.raises(StoreUnavailable) as refused:
            merge_distinct([0, 3600], batch, speed)
        assert refused.value.component == store, (batch, speed)
