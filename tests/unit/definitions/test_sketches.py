"""A stored sketch is read only once its header is checked: the library trusts the header it is
given, and crafted bytes made it allocate ~20 GB, read past its arrays (heap corruption) or crash
on a missing auxiliary map (SIGSEGV). Every input is a sketch or a BadSketch (no service)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from datasketches import hll_sketch, tgt_hll_type

from definitions.sketches import BadSketch, read_sketch, union_estimate
from definitions.views import HLL_LG_K

REPO = Path(__file__).resolve().parents[3]


def spark_like(n: int) -> bytes:
    """A sketch as Spark stores them: HLL_8, lg_k 12 (list, set or HLL mode by its size)."""
    s = hll_sketch(HLL_LG_K, tgt_hll_type.HLL_8)
    for i in range(n):
        s.update(f"visitor-{i}")
    return bytes(s.serialize_compact())


@pytest.mark.parametrize("n", [0, 1, 5, 50, 300, 5_000])
def test_sketches_as_spark_writes_them_are_read(n):
    assert abs(read_sketch(spark_like(n)).get_estimate() - n) <= max(1, 0.05 * n)


def with_header(raw: bytes, **at: int) -> bytes:
    b = bytearray(raw)
    for index, value in at.items():
        b[int(index[1:])] = value
    return bytes(b)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"", "shorter than"),
        (b"\x00" * 7, "shorter than"),
        (with_header(spark_like(50), b4=34, b5=102), r"2\^34 entries"),  # the ~20 GB allocation
        (with_header(spark_like(50), b2=3), "not a HyperLogLog"),
        (with_header(spark_like(50), b3=40), "lg_k 40"),
        (with_header(spark_like(1), b6=65), "65 coupons"),  # a list longer than its array
        (spark_like(5_000)[:-1], "has 4136"),
        (with_header(spark_like(5_000), b7=2), "register type 0"),  # HLL_4: the SIGSEGV
        (with_header(spark_like(5), b0=10), "not a known layout"),
    ],
)
def test_a_header_that_lies_is_refused_naming_what_is_wrong(raw, says):
    with pytest.raises(BadSketch, match=says):
        read_sketch(raw)


def test_a_union_the_library_refuses_is_a_bad_sketch():
    """A set whose count and coupons were changed (found by the fuzzing below): read, but a union
    holding it twice makes the library raise ("duplicate coupon", a RuntimeError)."""
    s = hll_sketch(HLL_LG_K, tgt_hll_type.HLL_8)
    for i in range(50):
        s.update(i)
    raw = with_header(bytes(s.serialize_updatable()), b8=105, b18=74, b28=228, b467=127)
    with pytest.raises(BadSketch, match="duplicate coupon"):
        union_estimate([read_sketch(raw), read_sketch(raw)], HLL_LG_K)


FUZZ = textwrap.dedent("""
    import random, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (1_500_000_000, 1_500_000_000))
    from datasketches import hll_sketch, tgt_hll_type
    from definitions.sketches import BadSketch, read_sketch, union_estimate
    bases = []
    for kind in (tgt_hll_type.HLL_4, tgt_hll_type.HLL_8):
        for n in (0, 1, 5, 50, 700, 20000):
            s = hll_sketch(12, kind)
            for i in range(n):
                s.update(i)
            bases += [bytes(s.serialize_compact()), bytes(s.serialize_updatable())]
    good = [read_sketch(b) for b in bases if b[7] >> 2 == 2]
    rnd, counts = random.Random(int(sys.argv[1])), {"sketch": 0, "bad": 0}
    for _ in range(int(sys.argv[2])):
        b = bytearray(rnd.choice(bases))
        for _ in range(rnd.randint(1, 4)):
            b[rnd.randrange(min(len(b), 48) if rnd.random() < 0.5 else len(b))] = rnd.randrange(256)
        if rnd.random() < 0.2:
            b = b[: rnd.randrange(len(b) + 1)]
        try:
            union_estimate([read_sketch(bytes(b)), rnd.choice(good)], 12)
            counts["sketch"] += 1
        except BadSketch:
            counts["bad"] += 1
    # This process's own peak (ru_maxrss would count the forking parent's memory too).
    peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
    print(counts["sketch"], counts["bad"], peak_kb // 1024)
""")


def test_mutated_sketches_are_sketches_or_bad_sketches_within_bounded_memory():
    """Random mutations of real sketches, in a process limited to 1.5 GB of address space: it
    neither crashes nor runs out of memory, and the library raises nothing but BadSketch."""
    done = subprocess.run(
        [sys.executable, "-c", FUZZ, "7", "20000"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,  # `-c` imports from the working directory, which another test may have left elsewhere
    )
    assert done.returncode == 0, f"status {done.returncode}: {done.stderr[-800:]}"
    read, refused, peak_mb = map(int, done.stdout.split())
    assert read > 1_000 and refused > 10_000 and peak_mb < 300, done.stdout
