"""The merge rule with a cutoff per view, on random histories (no services).

A model of the platform: events arrive (late, duplicated) and the speed layer keeps a row per
(view, key, event bucket, ingest bucket); batch runs — full or of a few views, sometimes two that
read the same pointer — write versioned tables, move the pointer with a compare-and-set, and apply
retention; the realtime clean-up deletes each view's rows below its cutoff. After every step, each
view answered as serving answers it (the table and cutoff `Pointer.source` gives, merged by
serving_layer.merge) equals the truth; retention never drops a table the pointer names, and keeps
each view's K newest served versions.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field

import pytest

from serving_layer.merge import BatchCell, SpeedCell, merge_additive, merge_top
from stores.pointer import Pointer, PointerMoved, retention_plan, table_name, table_version, table_view
from stores.pointer_moves import advance, check_unmoved

INGEST_MS = 60_000
BUCKET_S = 3_600
VIEWS = ("page_views", "visitors", "top_pages")  # keyed count, keyed distinct, by-bucket count


def cells(view: str, event: dict) -> tuple:
    """(key, event bucket, value contributed) of an event in a view."""
    bucket = event["event_time"] // BUCKET_S * BUCKET_S
    return (event["url"], bucket, event["user"] if view == "visitors" else 1)


def aggregate(view: str, events) -> dict:
    """{(key, bucket): count or set of users}."""
    out: dict = defaultdict(set) if view == "visitors" else defaultdict(int)
    for e in events:
        key, bucket, value = cells(view, e)
        if view == "visitors":
            out[(key, bucket)].add(value)
        else:
            out[(key, bucket)] += value
    return dict(out)


@dataclass
class Platform:
    rng: random.Random
    keep: int
    now_ms: int = 1_800_000_000_000
    events: list[dict] = field(default_factory=list)  # first copies, in ingest order
    seen: set = field(default_factory=set)
    realtime: dict = field(default_factory=dict)  # (view, key, bucket, ingest bucket s) -> count or set
    tables: dict = field(default_factory=dict)  # table name -> aggregate
    runs: dict = field(default_factory=dict)  # version -> run record
    stored: bytes | None = None  # the pointer cell in the meta table
    next_version: int = 1

    # --- stores -------------------------------------------------------------------------------

    def pointer(self) -> Pointer | None:
        return Pointer.from_doc(self.stored) if self.stored is not None else None

    def check_and_put(self, expected: bytes | None, new: bytes) -> bool:
        """HBase's checkAndPut on one cell: the only atomic step the model needs."""
        if self.stored != expected:
            return False
        self.stored = new
        return True

    # --- the pipeline -------------------------------------------------------------------------

    def ingest(self, n: int) -> None:
        for i in range(n):
            self.now_ms += self.rng.randint(0, 20_000)
            late = self.rng.random() < 0.3
            event_time = self.now_ms // 1000 - (self.rng.randint(3_600, 2 * 86_400) if late else self.rng.randint(0, 5))
            event = {
                "id": f"e{len(self.seen)}-{i}",
                "url": f"/p{self.rng.randint(0, 4)}",
                "user": f"u{self.rng.randint(0, 30)}",
                "event_time": event_time,
                "ingest_ms": self.now_ms,
            }
            copies = [event] + ([{**event, "ingest_ms": self.now_ms + 1}] if self.rng.random() < 0.1 else [])
            for copy in copies:  # both layers keep the first copy of an id
                if copy["id"] in self.seen:
                    continue
                self.seen.add(copy["id"])
                self.events.append(copy)
                ib = copy["ingest_ms"] // INGEST_MS * INGEST_MS // 1000
                for view in VIEWS:
                    key, bucket, value = cells(view, copy)
                    row = (view, key, bucket, ib)
                    if view == "visitors":
                        self.realtime[row] = self.realtime.get(row, frozenset()) | {value}
                    else:
                        self.realtime[row] = self.realtime.get(row, 0) + value

    def covered_ms(self) -> int:
        """The completeness marker: every record ingested before it is in the master dataset."""
        return self.now_ms // INGEST_MS * INGEST_MS

    def start_run(self, views: list[str] | None) -> int | None:
        """Plan (read the pointer, choose a cutoff no selected view is past) and write a version."""
        current = self.pointer()
        selected = list(views or VIEWS)
        floor = max((current.cutoff_of(v) for v in selected), default=0) if current else 0
        if floor > self.covered_ms():
            return None
        steps = (self.covered_ms() - floor) // INGEST_MS
        cutoff = floor + self.rng.randint(0, steps) * INGEST_MS if floor else self.covered_ms()
        version, self.next_version = self.next_version, self.next_version + 1
        for view in selected:
            self.tables[table_name(view, version)] = aggregate(
                view, [e for e in self.events if e["ingest_ms"] < cutoff]
            )
        self.runs[version] = {
            "state": "verified",
            "views": selected,
            "full": views is None,
            "cutoff_ms": cutoff,
            "run_id": f"run-{version}",
            "based_on": current.generation if current else 0,
            "started_ms": self.now_ms,
        }
        return version

    def swap(self, version: int) -> Pointer:
        """What swap_version does: check, advance, compare-and-set, retire, retention."""
        run = self.runs[version]
        current = self.pointer()
        check_unmoved(current, run["based_on"], version)
        new = advance(
            current,
            version=version,
            run_id=run["run_id"],
            cutoff_ms=run["cutoff_ms"],
            views=run["views"],
            full=run["full"],
            stats={},
            now_ms=self.now_ms,
        )
        if not self.check_and_put(current.stored if current else None, new.to_doc()):
            raise PointerMoved("the pointer moved since this run read it")
        run["state"] = "live"
        for v in (current.versions() if current else set()) - new.versions():
            self.runs[v]["state"] = "retired"
        self.retain()
        return new

    def retain(self) -> list[str]:
        pointer = self.pointer()
        dropped = retention_plan(
            pointer, self.runs, list(self.tables), self.keep, self.now_ms, 3_600_000, may_run=lambda run: False
        )
        assert not set(dropped) & pointer.tables(), "retention dropped a table the pointer names"
        for name in dropped:
            del self.tables[name]
        for view in VIEWS:
            served = sorted(
                (v for v, r in self.runs.items() if r["state"] in ("live", "retired") and view in r["views"]),
                reverse=True,
            )[: self.keep]
            assert {table_name(view, v) for v in served} <= set(self.tables), f"{view}: a kept version was dropped"
        return dropped

    def clean_realtime(self) -> None:
        cutoffs = self.pointer().cleanup_cutoffs_s()
        for row in [r for r in self.realtime if r[0] in cutoffs and r[3] < cutoffs[r[0]]]:
            del self.realtime[row]

    # --- serving -------------------------------------------------------------------------------

    def answer(self, view: str) -> dict:
        """{(key, bucket): merged value}, read as the serving layer reads it."""
        pointer = self.pointer()
        source = pointer.source(view) if pointer else None
        batch = self.tables[source.table] if source and source.table else {}
        cutoff_s = source.cutoff_ms // 1000 if source else 0
        speed: dict = defaultdict(frozenset) if view == "visitors" else defaultdict(int)
        for (v, key, bucket, ib), value in self.realtime.items():
            if v == view and ib >= cutoff_s:
                speed[(key, bucket)] = (
                    speed[(key, bucket)] | value if view == "visitors" else speed[(key, bucket)] + value
                )
        if view == "visitors":  # distinct: the union of the batch set and every realtime set
            return {k: len(batch.get(k, set()) | speed.get(k, frozenset())) for k in set(batch) | set(speed)}
        out = {}
        if view == "top_pages":  # per bucket, merge_top over keys
            for bucket in {b for _, b in set(batch) | set(speed)}:
                rows = merge_top(
                    {k: v for (k, b), v in batch.items() if b == bucket},
                    {k: v for (k, b), v in speed.items() if b == bucket},
                    limit=1_000,
                )
                out.update({(k, bucket): value for k, value, _, _ in rows})
            return out
        for key in {k for k, _ in set(batch) | set(speed)}:
            buckets = sorted({b for k, b in set(batch) | set(speed) if k == key})
            merged = merge_additive(
                buckets,
                {b: BatchCell(v) for (k, b), v in batch.items() if k == key},
                {b: SpeedCell(v) for (k, b), v in speed.items() if k == key},
            )
            out.update({(key, m.bucket): m.value for m in merged.buckets})
        return out

    def check_exact(self, what: str) -> None:
        for view in VIEWS:
            truth = {k: (len(v) if view == "visitors" else v) for k, v in aggregate(view, self.events).items()}
            got = {k: v for k, v in self.answer(view).items() if v}
            assert got == truth, f"{view} after {what}"


@pytest.mark.parametrize("seed", range(60))
def test_every_view_stays_exact_through_partial_interleaved_runs_cleanup_and_retention(seed):
    rng = random.Random(seed)
    platform = Platform(rng, keep=rng.randint(1, 3))
    platform.ingest(rng.randint(1, 60))
    platform.swap(platform.start_run(None))
    platform.check_exact("the first full run")
    for step in range(rng.randint(5, 25)):
        platform.ingest(rng.randint(0, 40))
        platform.check_exact(f"step {step}: traffic")
        views = None if rng.random() < 0.2 else rng.sample(VIEWS, rng.randint(1, 2))
        first = platform.start_run(views)
        if first is None:
            continue
        if rng.random() < 0.3:  # a second writer (the DAG, say) reads the same pointer meanwhile
            other = platform.start_run(None if rng.random() < 0.3 else rng.sample(VIEWS, rng.randint(1, 3)))
            winner, loser = (first, other) if rng.random() < 0.5 else (other, first)
            platform.swap(winner)
            before, tables = platform.stored, dict(platform.tables)
            with pytest.raises(PointerMoved, match="moved since this run read it"):
                platform.swap(loser)
            assert platform.stored == before and platform.tables == tables, "the loser changed nothing"
            assert platform.runs[loser]["state"] == "verified"
        else:
            platform.swap(first)
        platform.check_exact(f"step {step}: swap")
        if rng.random() < 0.7:
            platform.clean_realtime()
            platform.check_exact(f"step {step}: clean-up")
    pointer = platform.pointer()
    assert pointer.tables() <= set(platform.tables)


def test_retention_keeps_in_flight_runs_and_named_tables_only_of_this_store():
    pointer = Pointer.from_doc(Pointer().to_doc())  # empty pointer
    p = advance(pointer, version=1, run_id="r1", cutoff_ms=60_000, views=["a", "b"], full=True, stats={}, now_ms=0)
    runs = {
        1: {"state": "live", "views": ["a", "b"], "started_ms": 0},
        2: {"state": "retired", "views": ["a"], "started_ms": 0},
        3: {"state": "writing", "views": ["a"], "started_ms": 9_000_000, "pid": 1},
        4: {"state": "writing", "views": ["a"], "started_ms": 9_000_000, "pid": 2},
        5: {"state": "verified", "views": ["b"], "started_ms": 9_000_000},
        6: {"state": "verified", "views": ["b"], "started_ms": 0},
        7: {"state": "failed", "views": ["a"], "started_ms": 9_000_000},
    }
    tables = ["a_v1", "b_v1", "a_v2", "a_v3", "a_v4", "b_v5", "b_v6", "a_v7", "meta", "someone_elses_v1"]
    dropped = retention_plan(
        p, runs, tables, keep=1, now_ms=10_000_000, grace_ms=3_600_000, may_run=lambda run: run["pid"] == 1
    )
    # a_v2 served but beyond keep=1; a_v4's process is gone; b_v6 is verified but long ago; a_v7 failed
    assert dropped == ["a_v2", "a_v4", "a_v7", "b_v6"]
    assert all(table_view(t) and table_version(t) for t in dropped)


def test_retention_drops_only_tables_this_store_s_own_runs_made():
    """Any `<view>_v<N>` of a view some run wrote was dropped: another meta table's tables sharing the
    namespace (a staging store, the one it serves included), or the versions beyond a meta table
    restored from a backup (its counter at 2 while runs 3 and 4 made tables, one of them served)."""
    pointer = Pointer.from_doc(Pointer().to_doc())
    p = advance(pointer, version=2, run_id="r2", cutoff_ms=60_000, views=["a", "b"], full=True, stats={}, now_ms=0)
    runs = {
        1: {"state": "live", "views": ["a"], "started_ms": 0},
        2: {"state": "live", "views": ["a", "b"], "started_ms": 0},
    }
    theirs = ["a_v3", "a_v4", "b_v1", "b_v9"]  # no run of this store made these
    dropped = retention_plan(
        p, runs, ["a_v1", "a_v2", "b_v2", *theirs], keep=1, now_ms=10_000_000, grace_ms=1_000, may_run=lambda run: False
    )
    assert dropped == ["a_v1"], "only a table of this store's own run, beyond keep"


def test_retention_keeps_a_long_run_whose_process_still_runs_here_past_the_grace_period():
    """A run writing for longer than batch.retention_grace_s (a big history, a slow machine) keeps
    its tables while its process is known to run (this host); a run of another host, whose process
    cannot be asked (may_run: None), is trusted for the grace period only."""
    p = advance(None, version=1, run_id="r1", cutoff_ms=60_000, views=["a"], full=True, stats={}, now_ms=0)
    hour = 3_600_000
    now = 10 * hour
    runs = {
        1: {"state": "live", "views": ["a"], "started_ms": 0},
        2: {"state": "writing", "views": ["a"], "started_ms": now - 3 * hour, "pid": 2},  # alive here
        3: {"state": "writing", "views": ["a"], "started_ms": now - 3 * hour, "pid": 3},  # ended here
        4: {"state": "writing", "views": ["a"], "started_ms": now - 3 * hour, "pid": 4},  # elsewhere, long ago
        5: {"state": "writing", "views": ["a"], "started_ms": now - 60_000, "pid": 5},  # elsewhere, just now
        # verified after a long write, its swap still to come; and one verified long ago
        6: {"state": "verified", "views": ["a"], "started_ms": now - 3 * hour, "verified_ms": now - 60_000, "pid": 6},
        7: {"state": "verified", "views": ["a"], "started_ms": now - 3 * hour, "verified_ms": now - 2 * hour, "pid": 7},
    }
    alive = {2: True, 3: False, 4: None, 5: None}
    tables = ["a_v1", "a_v2", "a_v3", "a_v4", "a_v5", "a_v6", "a_v7"]
    dropped = retention_plan(p, runs, tables, keep=1, now_ms=now, grace_ms=hour, may_run=lambda r: alive[r["pid"]])
    assert dropped == ["a_v3", "a_v4", "a_v7"]


def test_a_run_of_another_host_that_still_beats_keeps_its_tables_past_the_grace_period():
    """A DAG run in another container, writing for longer than batch.retention_grace_s: a swap on
    this host dropped its tables, and hours of work failed at the verification."""
    p = advance(None, version=1, run_id="r1", cutoff_ms=60_000, views=["a"], full=True, stats={}, now_ms=0)
    hour = 3_600_000
    now = 10 * hour
    runs = {
        1: {"state": "live", "views": ["a"], "started_ms": 0},
        2: {"state": "writing", "views": ["a"], "started_ms": now - 3 * hour, "heartbeat_ms": now - 60_000},
        3: {"state": "writing", "views": ["a"], "started_ms": now - 3 * hour, "heartbeat_ms": now - 2 * hour},
    }
    dropped = retention_plan(p, runs, ["a_v1", "a_v2", "a_v3"], 1, now, grace_ms=hour, may_run=lambda r: None)
    assert dropped == ["a_v3"], "the one whose beats stopped goes; the one beating stays"


def test_a_run_beats_while_it_computes_and_stops_when_it_ends():
    import threading

    from batch_layer.heartbeat import heartbeat

    class Runs:
        def __init__(self) -> None:
            self.beats: list[int] = []
            self.third = threading.Event()

        def record_run_if(self, version: int, expected: str, **fields) -> bool:
            assert version == 7 and expected == "writing" and set(fields) == {"heartbeat_ms"}
            self.beats.append(fields["heartbeat_ms"])
            if len(self.beats) >= 3:
                self.third.set()
            return True

    store = Runs()
    with heartbeat(store, 7, every_s=0.01):
        assert store.third.wait(10), "no third beat"
    after = len(store.beats)
    assert not any(t.name == "run-heartbeat" for t in threading.enumerate()), "it stopped with the run"
    assert len(store.beats) == after and store.beats == sorted(store.beats)


def test_a_version_the_pointer_names_has_served_whatever_its_run_record_says():
    """A swap whose process died after its compare-and-set and before recording the run live left it
    "verified"; a partial run then moved one of its views on, and retention dropped the table that had
    just served that view (the rollback keep_versions promises, and the table answers from the
    previous pointer still read) while it kept an older one."""
    hour = 3_600_000
    now = 10 * hour
    p = advance(None, version=4, run_id="r4", cutoff_ms=60_000, views=["x", "y"], full=True, stats={}, now_ms=0)
    p = advance(p, version=5, run_id="r5", cutoff_ms=120_000, views=["x", "y"], full=True, stats={}, now_ms=0)
    p = advance(p, version=6, run_id="r6", cutoff_ms=180_000, views=["x"], full=False, stats={}, now_ms=0)
    assert p.entry("y").version == 5 and p.entry("x").version == 6
    runs = {
        4: {"state": "retired", "views": ["x", "y"], "started_ms": 0},
        5: {"state": "verified", "views": ["x", "y"], "started_ms": 0, "verified_ms": 0},  # its swap not recorded
        6: {"state": "live", "views": ["x"], "started_ms": 0},
    }
    tables = ["x_v4", "y_v4", "x_v5", "y_v5", "x_v6"]
    dropped = retention_plan(p, runs, tables, keep=2, now_ms=now, grace_ms=hour, may_run=lambda _run: None)
    assert "x_v5" not in dropped, dropped
    assert dropped == ["x_v4"], "x keeps its serving table and the one before; y keeps v5 (serving) and v4"
