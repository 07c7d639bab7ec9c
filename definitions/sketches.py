"""Reading a stored HyperLogLog sketch (Apache DataSketches' serialization) safely: its bytes come
from a store, and the library trusts the header it is given. A 212-byte sketch whose header claims a
coupon array of 2^34 entries made it allocate ~20 GB (measured: the process was killed for memory).
The header is checked first; anything else wrong is a BadSketch, never another kind of error."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datasketches import hll_sketch

SERIAL_VERSION = 1
HLL_FAMILY = 7
MAX_LG_K = 21  # the library's largest configuration: 2^21 registers (2 MiB as HLL_8)
# The preamble's length in 4-byte ints, by mode (the low two bits of byte 7): list, set, HLL.
PREAMBLE_INTS = {0: 2, 1: 3, 2: 10}
HLL_8 = 2  # bits 2-3 of byte 7: the register type (0 HLL_4, 1 HLL_6, 2 HLL_8)


class BadSketch(ValueError):
    """Bytes that are not a sketch the platform wrote (the message says what is wrong)."""


def check_header(raw: bytes) -> None:
    """Raises BadSketch unless `raw` starts with a header the platform's sketches could have: the
    HLL family and serial version, lg_k within the library's range, an array no larger than its
    registers (what bounds the memory deserializing takes), a known mode, and HLL_8 registers."""
    if len(raw) < 8:
        raise BadSketch(f"{len(raw)} bytes: shorter than a sketch's 8-byte header")
    pre_ints, version, family, lg_k, lg_arr, _flags, _count, mode = raw[:8]
    if family != HLL_FAMILY or version != SERIAL_VERSION:
        raise BadSketch(f"family {family}, serial version {version}: not a HyperLogLog sketch")
    if not 4 <= lg_k <= MAX_LG_K:
        raise BadSketch(f"lg_k {lg_k} out of 4..{MAX_LG_K}")
    if lg_arr > lg_k:
        raise BadSketch(f"an array of 2^{lg_arr} entries in a sketch of 2^{lg_k} registers")
    cur_mode, hll_type = mode & 3, (mode >> 2) & 3
    if PREAMBLE_INTS.get(cur_mode) != pre_ints:
        raise BadSketch(f"mode byte {mode} with a preamble of {pre_ints} ints: not a known layout")
    if hll_type != HLL_8:
        # Spark writes HLL_8 only. An HLL_4 sketch keeps out-of-range registers in an auxiliary
        # map, and one whose registers point to a map it lacks crashed the process (SIGSEGV).
        raise BadSketch(f"register type {hll_type}: the platform's sketches are HLL_8 ({HLL_8})")
    # The library reads as many entries as the header says, past the end of an array too short
    # for them (heap corruption, measured): the length must hold them.
    if cur_mode == 2:
        expected = 4 * pre_ints + (1 << lg_k)
        if len(raw) != expected:
            raise BadSketch(f"{len(raw)} bytes: an HLL_8 sketch of 2^{lg_k} registers has {expected}")
        return
    count = raw[6] if cur_mode == 0 else int.from_bytes(raw[8:12], "little")
    header, slots = 4 * pre_ints, 1 << lg_arr
    if count > slots or not header + 4 * count <= len(raw) <= header + 4 * slots:
        raise BadSketch(f"{count} coupons in an array of {slots} entries, {len(raw)} bytes")


def read_sketch(raw: bytes) -> hll_sketch:
    """The sketch `raw` holds; BadSketch (naming why) when it holds none."""
    from datasketches import hll_sketch

    check_header(raw)
    try:
        sketch = hll_sketch.deserialize(raw)
        estimate = sketch.get_estimate()
    except (ValueError, IndexError, RuntimeError, MemoryError, OverflowError) as exc:
        raise BadSketch(f"{type(exc).__name__}: {exc}"[:200]) from None
    if not 0 <= estimate <= 2**64:  # NaN too
        raise BadSketch(f"an estimate of {estimate}")
    return sketch


def union_estimate(sketches: Iterable[hll_sketch], lg_k: int) -> float:
    """The estimate of the union of `sketches` (read by read_sketch); BadSketch when the library
    refuses one of them there (e.g. a coupon list holding one coupon twice)."""
    from datasketches import hll_union

    union = hll_union(lg_k)
    try:
        for sketch in sketches:
            union.update(sketch)
        return union.get_result().get_estimate()
    except (ValueError, IndexError, RuntimeError, MemoryError, OverflowError) as exc:
        raise BadSketch(f"{type(exc).__name__}: {exc}"[:200]) from None
