"""The serving layer's two caches (no services): the batch part kept per table and run, and the
pointer reused for api.pointer_cache_s; and the clean-up's wait after a swap that makes the second
one exact. The stores are small in-memory adapters named in the settings (stores.*)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import pytest

from definitions.settings import Settings
from serving_layer.merge import BatchCell
from serving_layer.part_cache import PartCache, approx_bytes
from serving_layer.pointer_floor import PointerFloor
from serving_layer.service import ServingLayer, StoreUnavailable
from stores.pointer import DOC
from stores.pointer_moves import advance
from tests.support.polling import wait_for

HOUR = 3_600
CUTOFF_MS = 1_800_000_000_000 - 1_800_000_000_000 % (HOUR * 1000)


class MemoryBatchViews:
    """Batch tables in memory: {table: {bucket: value}} for one key, and the pointer's document."""

    current: MemoryBatchViews | None = None

    def __init__(self, settings: Any, *args: Any) -> None:
        self.tables: dict[str, dict[int, int]] = {}
        self.doc: bytes | None = None
        self.reads: list[str] = []
        MemoryBatchViews.current = self

    def publish(self, version: int, run_id: str, cells: dict[int, int], generation: int | None = None) -> None:
        pointer = advance(
            None,
            version=version,
            run_id=run_id,
            cutoff_ms=CUTOFF_MS,
            views=["page_views"],
            full=False,
            stats={},
            now_ms=int(time.time() * 1000),
        )
        if generation is not None:
            pointer = replace(pointer, generation=generation)
        self.tables[pointer.entries["page_views"].table] = dict(cells)
        self.doc = pointer.to_doc()

    def pointer_columns(self) -> dict[bytes, bytes]:
        self.reads.append("pointer")
        return {DOC: self.doc} if self.doc is not None else {}

    def series(self, table: str, view, granularity, keys, first: int, last: int) -> dict[int, tuple[int, None]]:
        self.reads.append(table)
        return {b: (v, None) for b, v in self.tables[table].items() if first <= b <= last}

    def totals(self, table: str, *args: Any) -> dict[str, int]:
        self.reads.append(table)
        return {}


class NoRealtime:
    """A realtime store with nothing in it, counting the reads."""

    reads = 0

    def __init__(self, settings: Any, **kwargs: Any) -> None:
        pass

    def series(self, *args: Any, **kwargs: Any) -> dict:
        NoRealtime.reads += 1
        return {}

    def bucket(self, *args: Any) -> dict:
        return {}

    def close(self) -> None:
        pass


def _serving(tmp_path, **api) -> tuple[ServingLayer, MemoryBatchViews]:
    settings = Settings(
        state_dir=tmp_path,
        ingest_bucket_s=HOUR,
        api=api,
        stores={
            "batch_views": f"{__name__}.MemoryBatchViews",
            "realtime_reader": f"{__name__}.NoRealtime",
        },
    )
    serving = ServingLayer(settings)
    serving.speed.known(None)  # no speed layer has started: HDFS is not asked
    assert MemoryBatchViews.current is not None
    return serving, MemoryBatchViews.current


def _total(serving: ServingLayer) -> int:
    view = next(v for v in serving.views if v.name == "page_views")
    start = CUTOFF_MS // 1000 - 10 * HOUR
    answer = serving.series(view, {"url": "/a"}, start, start + 10 * HOUR, "hour")
    return int(answer.series.total)


def test_the_batch_part_is_read_once_per_table_and_the_speed_part_every_time(tmp_path):
    serving, store = _serving(tmp_path, pointer_cache_s=0)
    first = CUTOFF_MS // 1000 - 3 * HOUR
    store.publish(1, "run-1", {first: 5, first + HOUR: 7})
    NoRealtime.reads = 0
    assert _total(serving) == 12
    assert _total(serving) == 12
    assert store.reads.count("pointer") == 2
    assert [r for r in store.reads if r != "pointer"] == ["page_views_v1"], store.reads
    assert NoRealtime.reads == 2
    assert serving.batch.cache.hits == 1 and serving.batch.cache.misses == 1


def test_a_new_version_is_read_from_its_own_table_and_a_reused_table_name_of_another_run_is_read_again(tmp_path):
    serving, store = _serving(tmp_path, pointer_cache_s=0)
    first = CUTOFF_MS // 1000 - 3 * HOUR
    store.publish(1, "run-1", {first: 5})
    assert _total(serving) == 5
    store.publish(2, "run-2", {first: 9})
    assert _total(serving) == 9
    store.publish(1, "run-3", {first: 4})  # the stores were wiped: version 1 again, another run
    assert _total(serving) == 4


def test_the_pointer_is_reused_for_pointer_cache_s_then_read_again(tmp_path):
    serving, store = _serving(tmp_path, pointer_cache_s=0.5)
    first = CUTOFF_MS // 1000 - 3 * HOUR
    store.publish(1, "run-1", {first: 5})
    assert _total(serving) == 5
    store.publish(2, "run-2", {first: 9})
    assert _total(serving) == 5, "within pointer_cache_s the pointer read before the swap serves"
    assert store.reads.count("pointer") == 1
    wait_for(lambda: _total(serving) == 9, "the new version to serve", timeout_s=5, interval_s=0.05)
    assert store.reads.count("pointer") >= 2


def test_without_pointer_cache_every_query_reads_the_pointer(tmp_path):
    serving, store = _serving(tmp_path, pointer_cache_s=0)
    store.publish(1, "run-1", {CUTOFF_MS // 1000 - HOUR: 1})
    for _ in range(3):
        _total(serving)
    assert store.reads.count("pointer") == 3


def test_batch_part_cache_is_bounded_by_bytes_and_keeps_no_failed_read():
    value = {i: BatchCell(i, b"s" * 100) for i in range(6)}
    one = approx_bytes("a") + approx_bytes(value)
    cache = PartCache(max_bytes=one + one // 2)
    assert cache.get("a", lambda: value) == value
    assert cache.get("a", lambda: pytest.fail("read again")) == value
    cache.get("b", lambda: dict(value))  # two do not fit: the least recently used goes
    assert cache.bytes <= cache.max_bytes
    calls = []
    cache.get("a", lambda: calls.append(1) or value)
    assert calls == [1], "a was evicted"
    cache.get("huge", lambda: {i: BatchCell(i, b"s" * 1000) for i in range(6)})  # larger than the cache: not kept
    assert cache.bytes <= cache.max_bytes

    def broken() -> dict:
        raise RuntimeError("store down")

    with pytest.raises(RuntimeError):
        cache.get("c", broken)
    assert cache.get("c", lambda: {2: 2}) == {2: 2}


def test_a_read_larger_than_the_whole_cache_is_said_not_dropped_silently(caplog):
    """A top-N of a large site read past api.batch_cache_mib: kept nowhere, it was read from HBase
    again at every query, and nothing said why."""
    cache = PartCache(max_bytes=2**20, setting="api.batch_cache_mib")
    with caplog.at_level("WARNING"):
        cache.get("top", lambda: {i: BatchCell(i, b"s" * 1000) for i in range(2_000)})
    assert cache.too_large == 1 and cache.bytes == 0
    assert "larger than the whole cache (api.batch_cache_mib, 1 MiB)" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        PartCache(max_bytes=0).get("off", lambda: {i: i for i in range(10_000)})
    assert caplog.text == "", "a cache turned off says nothing"


def test_long_keys_count_against_the_cache_too():
    cache = PartCache(max_bytes=100_000)
    for i in range(1_000):  # empty reads of distinct 2 KB keys (what a client can ask for)
        cache.get(("series", "/" + "x" * 2_000 + str(i)), dict)
    assert cache.bytes <= 100_000
    assert approx_bytes(("/" + "x" * 2_000,)) > 2_000


def test_batch_part_cache_off_reads_every_time():
    cache = PartCache(max_bytes=0)
    calls = []
    for _ in range(3):
        cache.get("a", lambda: calls.append(1) or {1: 1})
    assert len(calls) == 3 and cache.bytes == 0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_an_answer_slower_than_the_clean_up_settle_is_computed_again_on_a_fresh_pointer(tmp_path, monkeypatch):
    serving, store = _serving(tmp_path, pointer_cache_s=1)
    clock = Clock()
    monkeypatch.setattr("serving_layer.service.time.monotonic", clock)
    store.publish(1, "run-1", {CUTOFF_MS // 1000 - HOUR: 3})
    slow = iter([True])

    def realtime_read(*args, **kwargs):
        if next(slow, False):
            clock.now += serving.settings.batch.cleanup_settle_s + 1  # the first read hangs past the settle
        return {}

    monkeypatch.setattr(NoRealtime, "series", realtime_read)
    view = next(v for v in serving.views if v.name == "page_views")
    start = CUTOFF_MS // 1000 - 10 * HOUR
    answer = serving.series(view, {"url": "/a"}, start, start + 10 * HOUR, "hour")
    assert store.reads.count("pointer") == 2, "read again for the second attempt"
    assert answer.series.total == 3 and answer.provenance.complete


def test_an_answer_that_stays_slower_than_the_settle_is_flagged(tmp_path, monkeypatch):
    serving, store = _serving(tmp_path, pointer_cache_s=1)
    clock = Clock()
    monkeypatch.setattr("serving_layer.service.time.monotonic", clock)
    store.publish(1, "run-1", {CUTOFF_MS // 1000 - HOUR: 3})

    def realtime_read(*args, **kwargs):
        clock.now += serving.settings.batch.cleanup_settle_s + 1
        return {}

    monkeypatch.setattr(NoRealtime, "series", realtime_read)
    view = next(v for v in serving.views if v.name == "page_views")
    start = CUTOFF_MS // 1000 - 10 * HOUR
    answer = serving.series(view, {"url": "/a"}, start, start + 10 * HOUR, "hour")
    assert not answer.provenance.complete
    assert "batch.cleanup_settle_s" in answer.provenance.reasons[0]


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"api": {"pointer_cache_s": 5}, "batch": {"cleanup_settle_s": 8}}, "cleanup_settle_s"),
        ({"batch": {"keep_versions": 1}}, "keep_versions"),
        ({"stack": {"stuck_after_s": 100}}, "stuck_after_s"),  # ticks every 60 s with hour buckets
    ],
)
def test_settings_that_would_break_the_caches_promises_are_refused(changes, named):
    with pytest.raises(ValueError, match=named):
        Settings(ingest_bucket_s=HOUR, **changes)  # whatever LAMBDA_INGEST_BUCKET_S the shell has
    # Without a pointer cache too: an answer that read the pointer just before a swap still reads
    # the previous table, which retention would drop right after the swap.
    with pytest.raises(ValueError, match="keep_versions"):
        Settings(api={"pointer_cache_s": 0}, batch={"keep_versions": 1})


def test_a_pointer_read_that_began_before_a_newer_one_was_cached_does_not_replace_it(tmp_path):
    """Two queries read the pointer around a move: the one whose read ends last but began first
    brings back the older pointer; it is answered from it, but the cache keeps the newer one, so no
    later query goes back to the older pointer (views apply's switch relies on this)."""
    serving, store = _serving(tmp_path, pointer_cache_s=5)
    first = CUTOFF_MS // 1000 - 3 * HOUR
    store.publish(1, "run-1", {first: 5})
    older = serving.batch.pointer()
    store.publish(2, "run-2", {first: 9})
    newer = replace(serving.batch.pointer(), generation=older.generation + 1)  # publish() starts afresh
    serving.pointers.cached = (newer, time.monotonic())
    serving.pointers.read = lambda: older  # the late read
    got, _ = serving.pointers.get(fresh=True)
    assert got is older and serving.pointer() is newer
    # A cached pointer past its life is replaced by any read (a re-made store starts generations anew).
    serving.pointers.cached = (newer, time.monotonic() - 10)
    assert serving.pointer() is older


def _workers(tmp_path, pointer_cache_s: float) -> tuple[ServingLayer, ServingLayer, MemoryBatchViews]:
    """Two serving layers standing for two worker processes of one API: one store, one floor file."""
    floor = tmp_path / "workers" / "pointer-generation"
    floor.parent.mkdir()
    first, store = _serving(tmp_path, pointer_cache_s=pointer_cache_s)
    second, _ = _serving(tmp_path, pointer_cache_s=pointer_cache_s)
    second.batch.reader = first.batch.reader = store
    first.pointers.floor = PointerFloor(floor)
    second.pointers.floor = PointerFloor(floor)
    return first, second, store


def test_once_one_worker_answered_from_a_moved_pointer_no_worker_answers_from_an_older_one(tmp_path):
    """Sequential queries reaching two workers in turn: an answer from the new pointer by one worker
    is never followed by an answer from the old pointer by the other (views apply's switch)."""
    first, second, store = _workers(tmp_path, pointer_cache_s=5)
    bucket = CUTOFF_MS // 1000 - 3 * HOUR
    store.publish(1, "run-1", {bucket: 5}, generation=1)
    assert _total(first) == 5 and _total(second) == 5  # both keep the pointer for 5 s
    store.publish(2, "run-2", {bucket: 9}, generation=2)
    assert _total(first) == 5
    first.pointers.forget()  # its cache ends first
    assert _total(first) == 9
    assert _total(second) == 9, "the other worker went back to the older pointer"
    assert store.reads.count("pointer") == 4
    assert _total(second) == 9 and _total(first) == 9
    assert store.reads.count("pointer") == 4, "a pointer at the floor is reused"


def test_a_re_made_pointer_store_lowers_the_floor(tmp_path):
    """A fresh read below the floor read before it is a re-made store (HBase reads of one row are
    linearizable): the floor comes down to it, or every query would read the pointer from then on."""
    first, second, store = _workers(tmp_path, pointer_cache_s=5)
    bucket = CUTOFF_MS // 1000 - 3 * HOUR
    store.publish(7, "run-7", {bucket: 5}, generation=7)
    assert _total(first) == 5
    store.publish(1, "run-1", {bucket: 2}, generation=1)  # the stores were wiped and built again
    assert _total(second) == 2
    reads = store.reads.count("pointer")
    assert _total(second) == 2
    assert store.reads.count("pointer") == reads, "the pointer is read again at every query"
    assert second.pointers.floor.get() == 1


def test_queries_missing_the_same_key_at_once_share_one_read():
    cache = PartCache(max_bytes=1 << 20)
    started, release = threading.Event(), threading.Event()
    reads: list[str] = []

    def slow_read() -> dict:
        reads.append("read")
        started.set()
        release.wait(5)
        return {1: 1}

    results: list = []
    leader = threading.Thread(target=lambda: results.append(cache.get("k", slow_read)))
    leader.start()
    assert started.wait(5)
    followers = [threading.Thread(target=lambda: results.append(cache.get("k", slow_read))) for _ in range(5)]
    for f in followers:
        f.start()
    wait_for(
        lambda: cache.shared == 5, "the five followers to wait for the read under way", timeout_s=5, interval_s=0.01
    )
    release.set()
    for t in (leader, *followers):
        t.join(5)
    assert reads == ["read"] and results == [{1: 1}] * 6


def test_a_failed_shared_read_leaves_each_waiting_query_to_read_on_its_own():
    cache = PartCache(max_bytes=1 << 20)
    started, release = threading.Event(), threading.Event()

    def failing_read() -> dict:
        started.set()
        release.wait(5)
        raise RuntimeError("store down")

    errors: list = []

    def leader() -> None:
        try:
            cache.get("k", failing_read)
        except RuntimeError as exc:
            errors.append(exc)

    first = threading.Thread(target=leader)
    first.start()
    assert started.wait(5)
    got: list = []
    follower = threading.Thread(target=lambda: got.append(cache.get("k", lambda: {2: 2})))
    follower.start()
    wait_for(lambda: cache.shared == 1, "the follower to wait", timeout_s=5, interval_s=0.01)
    release.set()
    first.join(5)
    follower.join(5)
    assert len(errors) == 1 and got == [{2: 2}]


@pytest.mark.parametrize("doc", [b"{", b"[1]", b'{"entries": {"page_views": {"table": 1}}}', b"\xff", b"null"])
def test_a_pointer_document_that_is_none_is_the_batch_store_unavailable_not_a_fault(tmp_path, doc):
    from serving_layer.service import StoreUnavailable

    serving, store = _serving(tmp_path, pointer_cache_s=0)
    store.doc = doc
    with pytest.raises(StoreUnavailable) as caught:
        _total(serving)
    assert caught.value.component == "hbase" and "pointer" in caught.value.detail


def test_answers_say_incomplete_while_rows_the_speed_layer_dropped_late_are_not_in_a_batch(tmp_path):
    """Rows held back behind an open transaction (or a partition that lagged) came in later than the
    speed layer's watermark and were dropped; answers said complete all the same."""
    serving, store = _serving(tmp_path)
    store.publish(1, "run-1", {CUTOFF_MS // 1000 - HOUR: 3})
    view = next(v for v in serving.views if v.name == "page_views")
    start = CUTOFF_MS // 1000 - 10 * HOUR

    def answer():
        return serving.series(view, {"url": "/a"}, start, start + 10 * HOUR, "hour").provenance

    assert answer().complete
    serving.speed.known(None, late_drops=(CUTOFF_MS + HOUR * 1000, 7))  # dropped after the cutoff
    provenance = answer()
    assert not provenance.complete
    assert "7 rows" in provenance.reasons[0] and "later than its watermark" in provenance.reasons[0]
    serving.speed.known(None, late_drops=(CUTOFF_MS, 7))  # a row ingested at the cutoff: in no batch
    assert not answer().complete
    serving.speed.known(None, late_drops=(CUTOFF_MS - 1, 7))  # a batch covers every row it dropped
    assert answer().complete


def test_answers_say_incomplete_while_records_kafka_deleted_before_the_speed_layer_read_them_are_in_no_batch(
    tmp_path,
):
    """`lambdactl accept-loss speed-layer`: the speed layer ran past records retention deleted; the
    answers over them were short and said complete until a batch run covered them."""
    serving, store = _serving(tmp_path)
    store.publish(1, "run-1", {CUTOFF_MS // 1000 - HOUR: 3})
    view = next(v for v in serving.views if v.name == "page_views")
    start = CUTOFF_MS // 1000 - 10 * HOUR

    def answer():
        return serving.series(view, {"url": "/a"}, start, start + 10 * HOUR, "hour").provenance

    serving.speed.known(None, losses=((CUTOFF_MS + HOUR * 1000, 5),))  # recorded lost after the cutoff
    provenance = answer()
    assert not provenance.complete
    assert "5 records" in provenance.reasons[0] and "accept-loss" in provenance.reasons[0], provenance.reasons
    # Two losses after the cutoff: the answer may miss both (it gave the newest one's count only).
    serving.speed.known(None, losses=((CUTOFF_MS + HOUR * 1000, 5), (CUTOFF_MS + 2 * HOUR * 1000, 4)))
    assert "9 records" in answer().reasons[0], answer().reasons
    # One of them is covered by the batch: the other is what may be missing.
    serving.speed.known(None, losses=((CUTOFF_MS, 5), (CUTOFF_MS + 2 * HOUR * 1000, 4)))
    assert "4 records" in answer().reasons[0], answer().reasons
    serving.speed.known(None, losses=((CUTOFF_MS, 5),))  # the batch cutoff is past the loss's record
    assert answer().complete


def test_answers_over_event_times_records_the_archiver_lost_may_have_say_incomplete_for_good(tmp_path):
    """`lambdactl accept-loss archiver`: records Kafka deleted before the archiver stored them are in
    no batch, ever. Their event times are unknown, but none is later than when the loss was recorded
    plus the producers' allowed skew: answers over earlier buckets say they may miss them, whatever
    the cutoff; answers only over later buckets are complete."""
    serving, store = _serving(tmp_path)
    store.publish(1, "run-1", {CUTOFF_MS // 1000 - HOUR: 3})
    view = next(v for v in serving.views if v.name == "page_views")
    recorded_ms = CUTOFF_MS - 20 * HOUR * 1000  # long before the batch cutoff: a batch never has them
    skew_s = serving.settings.events.max_future_s

    def answer(start_s: int, hours: int = 2):
        return serving.series(view, {"url": "/a"}, start_s, start_s + hours * HOUR, "hour").provenance

    serving.speed.known(None, archiver_losses=((recorded_ms, 6), (recorded_ms - HOUR * 1000, 2)))
    over = answer(recorded_ms // 1000 - 5 * HOUR, hours=10)
    assert not over.complete
    reason = next(r for r in over.reasons if "archiver" in r)
    assert "8 records" in reason and "accept-loss archiver" in reason, over.reasons
    top = serving.top(view, recorded_ms // 1000 - 5 * HOUR, recorded_ms // 1000, "hour", 10).provenance
    assert not top.complete, "top answers say it too"
    # The last bucket that can hold one starts before recorded + skew; the first after it cannot.
    last = (recorded_ms // 1000 + skew_s - 1) // HOUR * HOUR
    assert not answer(last, hours=1).complete
    assert answer(last + HOUR).complete, answer(last + HOUR).reasons


class BrokenSketches(NoRealtime):
    """A realtime store whose one row of a distinct view holds bytes that are no sketch."""

    def series(self, *args: Any, **kwargs: Any) -> dict:
        from stores.realtime import RealtimeCell

        return {CUTOFF_MS // 1000: RealtimeCell(1, [b"\x02\x01\x07\x0c\x22\x00\x01\x08"], 1)}


def _distinct_serving(tmp_path, realtime_reader: str) -> tuple[ServingLayer, MemoryBatchViews]:
    """A serving layer over `realtime_reader` (a class of this module) whose pointer serves
    unique_visitors below CUTOFF_MS from the in-memory batch store."""
    settings = Settings(
        state_dir=tmp_path,
        ingest_bucket_s=HOUR,
        stores={"batch_views": f"{__name__}.MemoryBatchViews", "realtime_reader": f"{__name__}.{realtime_reader}"},
    )
    serving = ServingLayer(settings)
    serving.speed.known(None)
    store = MemoryBatchViews.current
    assert store is not None
    store.doc = advance(
        None, version=1, run_id="r", cutoff_ms=CUTOFF_MS, views=["unique_visitors"], full=False, stats={}, now_ms=0
    ).to_doc()
    return serving, store


def test_a_broken_speed_sketch_is_the_speed_parts_failure_and_a_partial_answer_leaves_it_out(tmp_path):
    from datasketches import hll_sketch, tgt_hll_type

    serving, store = _distinct_serving(tmp_path, "BrokenSketches")
    sketch = hll_sketch(12, tgt_hll_type.HLL_8)
    for visitor in ("v1", "v2", "v3"):
        sketch.update(visitor)
    first = CUTOFF_MS // 1000 - HOUR
    store.series = lambda *_: {first: (3, bytes(sketch.serialize_updatable()))}  # type: ignore[method-assign]
    view = next(v for v in serving.views if v.name == "unique_visitors")
    with pytest.raises(StoreUnavailable) as refused:
        serving.series(view, {"url": "/a"}, first, first + 2 * HOUR, "hour")
    assert refused.value.component == "cassandra"
    answer = serving.series(view, {"url": "/a"}, first, first + 2 * HOUR, "hour", allow_partial=True)
    assert answer.series.total == 3 and answer.provenance.unavailable == ["cassandra"]


class OneSketch(NoRealtime):
    """A realtime store whose one row of a distinct view holds a sketch of two visitors."""

    def series(self, *args: Any, **kwargs: Any) -> dict:
        from datasketches import hll_sketch, tgt_hll_type

        from stores.realtime import RealtimeCell

        sketch = hll_sketch(12, tgt_hll_type.HLL_8)
        for visitor in ("v8", "v9"):
            sketch.update(visitor)
        return {CUTOFF_MS // 1000: RealtimeCell(2, [bytes(sketch.serialize_updatable())], 1)}


def test_a_distinct_answer_reads_each_speed_sketch_once(tmp_path, monkeypatch):
    """Each speed sketch was read (checked and deserialised) twice per query: once to find a broken
    one before the merge, once by the merge."""
    from definitions import sketches

    serving, store = _distinct_serving(tmp_path, "OneSketch")
    store.series = lambda *_: {}  # type: ignore[method-assign]
    reads: list[int] = []
    real = sketches.read_sketch
    monkeypatch.setattr(sketches, "read_sketch", lambda raw: reads.append(len(raw)) or real(raw))
    view = next(v for v in serving.views if v.name == "unique_visitors")
    answer = serving.series(view, {"url": "/a"}, CUTOFF_MS // 1000, CUTOFF_MS // 1000 + HOUR, "hour")
    assert answer.series.total == pytest.approx(2, abs=0.01)
    assert len(reads) == 1, reads


def test_a_read_refused_as_too_large_is_refused_to_its_waiters_and_later_without_reading_again():
    """A top-pages window over many keys was refused (422) only after the read had held up to
    `api.max_read_mib`, and every request asking it again (or waiting on it) read it all again."""
    from stores.adapters import ReadTooLarge

    cache = PartCache(max_bytes=1 << 20, refusals=(ReadTooLarge,))
    started, release = threading.Event(), threading.Event()
    reads: list[str] = []

    def huge_read() -> dict:
        reads.append("read")
        started.set()
        release.wait(5)
        raise ReadTooLarge("top_pages: the window holds more than 64 MiB")

    refused: list[str] = []

    def ask() -> None:
        try:
            cache.get("k", huge_read)
        except ReadTooLarge as exc:
            refused.append(str(exc))

    leader = threading.Thread(target=ask)
    leader.start()
    assert started.wait(5)
    followers = [threading.Thread(target=ask) for _ in range(4)]
    for f in followers:
        f.start()
    wait_for(lambda: cache.shared == 4, "the followers to wait for the read under way", timeout_s=5, interval_s=0.01)
    release.set()
    for t in (leader, *followers):
        t.join(5)
    ask()  # asked again later: the kept refusal
    assert reads == ["read"], "one read for six refusals"
    assert refused == ["top_pages: the window holds more than 64 MiB"] * 6
    assert cache.get("other", lambda: {1: 1}) == {1: 1}, "other keys read as before"
