"""How realtime rows are grouped into unlogged batches (stores.realtime_statements.replica_groups): by the
replicas that own them, up to a size, every row exactly once, in order."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from stores.realtime_statements import replica_groups, value_bytes


@dataclass(frozen=True)
class Bound:
    """What replica_groups reads of a bound statement."""

    routing_key: bytes
    values: tuple
    n: int


def statements(seed: int, count: int) -> list[Bound]:
    r = random.Random(seed)
    out = []
    for n in range(count):
        key = f"/page/{r.randrange(50)}".encode()
        sketch = bytes(r.randrange(3000)) if r.random() < 0.1 else None
        out.append(Bound(key, (b"page_views", b"minute", key, b"\0" * 8, b"\0" * 8, b"\0" * 8, sketch, b"\0" * 8), n))
    return out


def replicas_of(routing_key: bytes) -> tuple[str, ...]:
    """Three nodes, each key on two of them."""
    first = sum(routing_key) % 3
    return tuple(sorted((f"node{first}", f"node{(first + 1) % 3}")))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("max_bytes", [1, 200, 5_120, 100_000])
def test_every_row_once_in_order_on_one_replica_set_within_the_size(seed, max_bytes):
    rows = statements(seed, 600)
    groups = replica_groups(rows, replicas_of, max_bytes)
    assert sorted(s.n for group in groups for s in group) == list(range(len(rows)))
    for group in groups:
        assert len({replicas_of(s.routing_key) for s in group}) == 1, "a batch spans two replica sets"
        assert [s.n for s in group] == sorted(s.n for s in group)
        assert len(group) == 1 or sum(value_bytes(s.values) for s in group) <= max_bytes


def test_groups_fill_up_to_the_size():
    rows = statements(1, 2_000)
    groups = replica_groups(rows, lambda _key: ("one-node",), 5_120)
    sizes = [sum(value_bytes(s.values) for s in group) for group in groups]
    # Every group but the last was closed because the next row would not fit.
    for size, following in zip(sizes, groups[1:]):
        assert size + value_bytes(following[0].values) > 5_120
    assert len(groups) < len(rows) / 10


def test_zero_bytes_sends_every_row_alone():
    rows = statements(2, 50)
    assert replica_groups(rows, replicas_of, 0) == [[s] for s in rows]
