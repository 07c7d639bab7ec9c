"""When a swap landed, as the clean-up's settle counts it, and which runs a move records (no
service: the version store's HBase calls replaced by recorders)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from definitions.settings import Settings
from lambdactl import batch
from stores.batch_views import VersionStore
from stores.pointer_moves import advance

NOW_MS = 1_800_000_000_000


def _pointer(version: int, current=None, now_ms: int = NOW_MS):
    return advance(
        current,
        version=version,
        run_id=f"run-{version}",
        cutoff_ms=NOW_MS - 3_600_000,
        views=["page_views"],
        full=False,
        stats={},
        now_ms=now_ms,
    )


@pytest.fixture
def store(monkeypatch):
    made = VersionStore(Settings())
    made.recorded = []  # type: ignore[attr-defined]
    monkeypatch.setattr(made, "compare_and_set", lambda current, new: None)
    monkeypatch.setattr(made, "record_run", lambda version, **fields: made.recorded.append((version, fields)))
    return made


def test_a_swap_records_when_it_landed_and_a_move_that_keeps_the_version_records_nothing(store, monkeypatch):
    from stores import batch_views

    monkeypatch.setattr(batch_views.time, "time", lambda: NOW_MS / 1000 + 12)  # the compare-and-set took 12 s
    first = _pointer(1)
    store.swap(None, first)
    assert store.recorded == [(1, {"state": "live", "swapped_ms": NOW_MS, "swap_landed_ms": NOW_MS + 12_000})]
    store.recorded.clear()
    bookkeeping = replace(first, generation=first.generation + 1)  # retiring bookkeeping: same version
    store.swap(first, bookkeeping)
    assert store.recorded == [], "a dropped run was marked live again by each bookkeeping move"


def test_the_clean_up_settles_from_when_the_swap_landed(monkeypatch, tmp_path):
    from stores import registry

    settings = Settings(state_dir=tmp_path, batch={"cleanup_settle_s": 20})  # none persisted: its own alone
    pointer = _pointer(3)
    runs = {3: {"swap_landed_ms": NOW_MS + 15_000}}
    monkeypatch.setattr(registry, "version_store", lambda _s: SimpleNamespace(runs=lambda: runs))
    slept = []
    monkeypatch.setattr(batch.time, "sleep", slept.append)
    monkeypatch.setattr(batch.time, "time", lambda: NOW_MS / 1000 + 16)
    batch.settle_after_swap(settings, pointer)
    assert slept == [pytest.approx(settings.batch.cleanup_settle_s - 1)], "from the landing, not the stamp"
    runs[3] = {}  # no record of it (killed between the swap and the record): the pointer's stamp
    slept.clear()
    batch.settle_after_swap(settings, pointer)
    assert slept == [pytest.approx(settings.batch.cleanup_settle_s - 16)]


def test_the_clean_up_settles_as_long_as_the_running_api_waits(monkeypatch, tmp_path):
    """The API takes the persisted settings alone: lambdactl told a shorter batch.cleanup_settle_s (its
    environment, a TOML file) deleted realtime rows an answer from the previous pointer still read."""
    from definitions.settings_store import persist
    from stores import registry

    persist(Settings(state_dir=tmp_path, batch={"cleanup_settle_s": 60}))
    told = Settings(state_dir=tmp_path, batch={"cleanup_settle_s": 6})
    runs = {3: {"swap_landed_ms": NOW_MS + 15_000}}
    monkeypatch.setattr(registry, "version_store", lambda _s: SimpleNamespace(runs=lambda: runs))
    slept: list = []
    monkeypatch.setattr(batch.time, "sleep", slept.append)
    monkeypatch.setattr(batch.time, "time", lambda: NOW_MS / 1000 + 16)
    batch.settle_after_swap(told, _pointer(3))
    assert slept == [pytest.approx(60 - 1)], "the running API's settle, from the landing"


def test_a_swap_that_landed_is_not_failed_by_its_bookkeeping(store, monkeypatch, caplog):
    # The compare-and-set moved the pointer; the run records after it then time out. The swap is
    # done (the version serves): the caller hears success, and the log says what is not recorded.
    def timing_out(version, **fields):
        raise TimeoutError("Thrift read timed out")

    monkeypatch.setattr(store, "record_run", timing_out)
    first = _pointer(1)
    with caplog.at_level("WARNING"):
        store.swap(None, first)
        store.swap(first, _pointer(2, first))
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 2 and all("serves" in w and "--swap" in w for w in warned), warned


def test_a_swap_that_landed_unrecorded_is_settled_from_now_and_recorded(monkeypatch, tmp_path):
    """The compare-and-set landed after a slow wait and the call timed out: the run stayed
    `verified`, with no landing time, and the clean-up settled from the pointer's stamp, made
    before that wait: short by it."""
    from stores import registry

    settings = Settings(state_dir=tmp_path, batch={"cleanup_settle_s": 20})  # none persisted: its own alone
    pointer = _pointer(3)
    runs = {2: {"state": "live"}, 3: {"state": "verified"}}
    recorded: list = []
    now_pointer = {"p": pointer}
    fake = SimpleNamespace(
        runs=lambda: runs,
        pointer=lambda: now_pointer["p"],
        record_run=lambda version, **fields: recorded.append((version, fields)),
    )
    monkeypatch.setattr(registry, "version_store", lambda _s: fake)
    slept: list = []
    monkeypatch.setattr(batch.time, "sleep", slept.append)
    monkeypatch.setattr(batch.time, "time", lambda: NOW_MS / 1000 + 40)  # the stamp is 40 s old
    batch.settle_after_swap(settings, pointer)
    assert slept == [pytest.approx(settings.batch.cleanup_settle_s)], "the whole wait, from now"
    assert recorded[0] == (3, {"state": "live", "swapped_ms": NOW_MS, "swap_landed_ms": NOW_MS + 40_000})
    assert (2, {"state": "retired"}) in recorded, "the run it replaced"
    # A run swapped since the caller read the pointer: recording from that old pointer would retire
    # the run now serving. The wait is whole all the same; nothing is recorded.
    recorded.clear()
    slept.clear()
    runs.update({3: {"state": "verified"}, 4: {"state": "live"}})
    now_pointer["p"] = _pointer(4, pointer)
    batch.settle_after_swap(settings, pointer)
    assert slept == [pytest.approx(settings.batch.cleanup_settle_s)] and recorded == []


def test_a_batch_already_at_its_cutoff_records_a_swap_that_landed_unrecorded(monkeypatch):
    """`lambdactl batch` again after a swap that timed out: "already at this cutoff", and the run
    that serves stayed `verified` for good."""
    from batch_layer import job

    pointer = _pointer(3)
    runs = {3: {"state": "verified"}}
    store = SimpleNamespace(pointer=lambda: pointer, runs=lambda: runs)
    monkeypatch.setattr(job, "version_store", lambda _s: store)
    monkeypatch.setattr(job, "selected_views", lambda s, current, views: [SimpleNamespace(name="page_views")])
    monkeypatch.setattr(job, "choose_cutoff", lambda s, cutoff_ms, current, names: pointer.cutoff_of("page_views"))
    monkeypatch.setattr(job, "missing_tables", lambda s, tables: [])
    swapped: list = []
    monkeypatch.setattr(job, "swap_version", lambda s, version: swapped.append(version))
    result = job.run_batch(Settings(), views=["page_views"])
    assert result.skipped == "already at this cutoff" and swapped == [3]
    runs[3] = {"state": "live"}
    job.run_batch(Settings(), views=["page_views"])
    assert swapped == [3], "a recorded swap is not done again"
