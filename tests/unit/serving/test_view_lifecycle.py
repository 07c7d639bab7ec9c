"""When a view added to a running platform may be served (stores.view_lifecycle), on random histories.

A model: events arrive with increasing ingest times; the speed layer is restarted with a new view at
time S (it counts every event ingested from S on, and some of the backlog before S: whatever its
checkpoint had not committed); a batch run of the view at an ingest-bucket cutoff T counts the events
ingested before T. The merged answer (batch, plus realtime rows of ingest buckets at or after T) must
equal the truth whenever the rules say `serving`, and the rules must say `serving` once T ≥ S.
"""

from __future__ import annotations

import random

import pytest

from stores.pointer import Pointer, ViewEntry, retention_plan, table_name
from stores.pointer_moves import retire, retiring_done
from stores.view_lifecycle import first_cutoff_ms, lifecycle, lifecycles, maintained_since

BUCKET_MS = 60_000


def pointer_with(**cutoffs: int) -> Pointer:
    return Pointer({name: ViewEntry(f"{name}_v1", 1, cutoff) for name, cutoff in cutoffs.items()}, version=1)


@pytest.mark.parametrize("seed", range(200))
def test_a_view_said_to_serve_answers_exactly(seed):
    rng = random.Random(seed)
    ingest = sorted(rng.randrange(0, 40 * BUCKET_MS) for _ in range(rng.randrange(1, 300)))
    since = rng.randrange(1, 40 * BUCKET_MS)
    backlog_from = since - rng.randrange(0, 5 * BUCKET_MS)  # before S, what the checkpoint had not committed
    counted = [t for t in ingest if t >= since or (t >= backlog_from and rng.random() < 0.5)]
    cutoff = rng.randrange(0, 41) * BUCKET_MS
    pointer = pointer_with(new=cutoff) if rng.random() < 0.8 else None
    state = lifecycle("new", {"old": 0, "new": since}, pointer)

    batch = sum(1 for t in ingest if t < cutoff) if pointer is not None else 0
    served_from = cutoff if pointer is not None else 0
    speed = sum(1 for t in counted if t // BUCKET_MS * BUCKET_MS >= served_from)
    if state.state == "serving":
        assert batch + speed == len(ingest), (since, cutoff, state)
    assert (state.state == "serving") == (pointer is not None and cutoff >= since), state
    if pointer is not None and cutoff >= first_cutoff_ms(since, BUCKET_MS // 1000):
        assert state.state == "serving"


def test_views_of_the_first_start_serve_from_their_first_rows_and_a_new_one_builds():
    first = maintained_since(None, ["a", "b"], now_ms=5_000)
    assert first == {"a": 0, "b": 0}
    assert lifecycle("a", first, None).state == "serving"
    later = maintained_since(first, ["a", "b", "c"], now_ms=90_000)
    assert later == {"a": 0, "b": 0, "c": 90_000}
    c = lifecycle("c", later, pointer_with(c=BUCKET_MS))
    assert c.state == "building" and "no batch version covers" in c.reason and c.since_ms == 90_000
    assert lifecycle("c", later, pointer_with(c=BUCKET_MS * 3)).state == "serving"
    # Declared, but the speed layer has not restarted with it: building, whatever the batch says.
    d = lifecycle("d", later, pointer_with(d=10**12))
    assert d.state == "building" and "does not maintain it yet" in d.reason
    # No marker yet: the speed layer will read the topic from the beginning.
    assert lifecycle("d", None, None).state == "serving"


def test_a_removed_view_is_dropped_and_starts_over_when_declared_again():
    views = maintained_since({"a": 0, "c": 9_000}, ["a"], now_ms=20_000)
    assert views == {"a": 0}
    again = maintained_since(views, ["a", "c"], now_ms=30_000)
    assert again["c"] == 30_000
    # Its old table (cutoff before the new start) does not make it serve.
    assert lifecycle("c", again, pointer_with(c=25_000)).state == "building"


def test_retired_views_are_listed_after_the_declared_and_retire_drops_their_entries():
    pointer = pointer_with(a=BUCKET_MS, gone=BUCKET_MS)
    states = lifecycles(["a", "new"], {"a": 0}, pointer)
    assert [(s.name, s.state) for s in states] == [("a", "serving"), ("new", "building"), ("gone", "retired")]
    after = retire(pointer, ["gone"], now_ms=7)
    assert set(after.entries) == {"a"} and after.generation == pointer.generation + 1
    assert after.entries["a"] == pointer.entries["a"] and after.swapped_ms == 7


@pytest.mark.parametrize(("since", "cutoff"), [(1, 60_000), (60_000, 60_000), (60_001, 120_000), (0, 0)])
def test_the_first_cutoff_is_the_next_bucket_boundary(since, cutoff):
    assert first_cutoff_ms(since, 60) == cutoff


def test_retention_drops_every_table_of_a_retired_view_and_keeps_the_others_versions():
    runs = {v: {"state": "retired" if v == 1 else "live", "views": ["a", "gone"], "started_ms": 0} for v in (1, 2)}
    served = Pointer(
        {name: ViewEntry(table_name(name, 2), 2, BUCKET_MS) for name in ("a", "gone")}, version=2, generation=1
    )
    tables = [table_name(view, v) for view in ("a", "gone") for v in (1, 2)]
    plan = lambda p: retention_plan(p, runs, tables, 2, 10**13, 1, lambda r: False)  # noqa: E731
    assert plan(served) == []
    retired = retire(served, ["gone"], now_ms=5)
    assert plan(retiring_done(retired, ["gone"], now_ms=6)) == [table_name("gone", 1), table_name("gone", 2)]


def test_a_retired_views_newest_table_stays_until_its_clean_up_has_run():
    """A swap's retention right after `views apply` retired a view dropped the table an answer from
    the pointer read just before (kept api.pointer_cache_s) was still reading. It stays while the
    name is retiring: the realtime clean-up takes it off after batch.cleanup_settle_s."""
    from stores.pointer_moves import advance

    runs = {v: {"state": "retired" if v == 1 else "live", "views": ["a", "gone"], "started_ms": 0} for v in (1, 2)}
    runs[3] = {"state": "live", "views": ["a"], "started_ms": 0}
    served = Pointer(
        {name: ViewEntry(table_name(name, 2), 2, BUCKET_MS) for name in ("a", "gone")}, version=2, generation=1
    )
    tables = [table_name(view, v) for view in ("a", "gone") for v in (1, 2)] + [table_name("a", 3)]
    plan = lambda p: retention_plan(p, runs, tables, 2, 10**13, 1, lambda r: False)  # noqa: E731
    retired = retire(served, ["gone"], now_ms=5)
    # A swap after the retirement (its retention runs right then) keeps the newest "gone" table.
    swapped = advance(
        retired, version=3, run_id="r3", cutoff_ms=2 * BUCKET_MS, views=["a"], full=False, stats={}, now_ms=10**13
    )
    assert plan(swapped) == [table_name("a", 1), table_name("gone", 1)]
    cleaned = retiring_done(swapped, ["gone"], now_ms=10**13 + 1)
    assert plan(cleaned) == [table_name("a", 1), table_name("gone", 1), table_name("gone", 2)]


# --- a view changed in place under the same name --------------------------------------------------


def test_the_fingerprint_follows_what_the_values_depend_on_not_the_description():
    from dataclasses import replace

    from definitions.views import PAGE_VIEWS, PAGE_VIEWS_BY_CHANNEL

    assert replace(PAGE_VIEWS, description="another text").fingerprint == PAGE_VIEWS.fingerprint
    assert PAGE_VIEWS.fingerprint is PAGE_VIEWS.fingerprint, "computed once per declaration"
    for change in (
        {"where": "event_type = 'click'"},
        {"keys": ("url", "country")},
        {"granularities": ("hour", "day")},
        {"layout": "by_bucket"},
    ):
        assert replace(PAGE_VIEWS, **change).fingerprint != PAGE_VIEWS.fingerprint, change
    assert replace(PAGE_VIEWS_BY_CHANNEL, defaults={"channel": "app"}).fingerprint != PAGE_VIEWS_BY_CHANNEL.fingerprint


def test_a_view_declared_differently_from_what_the_speed_layer_maintains_is_refused():
    from stores.view_lifecycle import changed_definitions

    applied = {"a": "fp-a", "b": "fp-b"}
    assert changed_definitions({"a": "fp-a", "b": "fp-b2", "new": "x"}, applied) == ["b"]
    assert changed_definitions({"a": "other"}, None) == [], "a marker without definitions checks nothing"
    pointer = pointer_with(a=60_000, b=60_000)
    states = {s.name: s for s in lifecycles(["a", "b"], {"a": 0, "b": 0}, pointer, changed=["b"])}
    assert states["a"].state == "serving"
    assert states["b"].state == "building" and "differs from the one the speed layer maintains" in states["b"].reason
