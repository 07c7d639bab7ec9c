"""The accuracy report's marks of an event's later copies (reports.read.later_copies, local Spark,
no service): the same as the fold they replace, over random chains and one long chain."""

from __future__ import annotations

import random

import pytest

from reports.read import later_copies

WINDOW_US = 120_000_000


def reference(chain: list[tuple[int, int, int]]) -> list[tuple[int, int, int, bool]]:
    """The rule, one copy after another: a copy more than the window after the last counted copy
    (the first, or the last recount) is counted again and becomes the reference."""
    ref = chain[0][0]
    out = []
    for t, p, o in chain[1:]:
        gap = t - ref
        out.append((p, o, gap, gap > WINDOW_US))
        if gap > WINDOW_US:
            ref = t
    return out


def marks(spark, chains: list[list[tuple[int, int, int]]]) -> list[tuple[int, int, int, bool]]:
    rows = [([{"t": t, "p": p, "o": o} for t, p, o in sorted(chain)],) for chain in chains]
    frame = spark.createDataFrame(rows, "c array<struct<t:bigint,p:int,o:bigint>>")
    got = later_copies(frame, WINDOW_US).collect()
    return sorted((r.kafka_partition, r.kafka_offset, r.gap_us, r.recount) for r in got)


def test_random_chains_are_marked_as_the_fold_marks_them(spark):
    rng = random.Random(7)
    chains = []
    offset = 0
    for _ in range(200):
        size = rng.randint(2, 12)
        base = rng.randint(0, 10**12)
        chain = []
        for _ in range(size):  # gaps around the window, equal times included
            base += rng.choice([0, 1, WINDOW_US - 1, WINDOW_US, WINDOW_US + 1, rng.randint(0, 3 * WINDOW_US)])
            offset += 1
            chain.append((base, rng.randint(0, 3), offset))
        chains.append(chain)
    expected = sorted(mark for chain in chains for mark in reference(sorted(chain)))
    assert any(m[3] for m in expected) and any(not m[3] for m in expected), "both kinds are tested"
    assert marks(spark, chains) == expected


@pytest.mark.parametrize("spread_us", [0, WINDOW_US // 100])
def test_one_event_sent_twenty_thousand_times_is_marked_as_the_rule_marks_it(spark, spread_us):
    # Copies a hostile producer sends at once (spread 0: all at one instant) or over 200 windows.
    # (How the time grows with their number: bench/report_duplicate_chain.py.)
    chain = [(i * spread_us, i % 2, i) for i in range(20_000)]
    assert marks(spark, [chain]) == sorted(reference(chain))
