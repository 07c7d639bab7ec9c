"""The pointer row's format, without a store: per-view entries round-trip; rows in the older
single-cutoff format are read with every view at that cutoff; the legacy columns written beside the
document are what an older reader needs; moves keep unrecomputed views and never go back."""

from __future__ import annotations

import json

import pytest

from stores.pointer import (
    DOC,
    HAS_DOC,
    CutoffError,
    Pointer,
    PointerFormatError,
    PointerMoved,
    ViewEntry,
    table_version,
)
from stores.pointer_moves import advance, check_unmoved

T0 = 1_800_000_000_000
MIN = 60_000


def per_view() -> Pointer:
    return Pointer(
        {
            "page_views": ViewEntry("page_views_v1", 1, T0, "run-1", T0 + 5, {"events": 10}),
            "unique_visitors": ViewEntry("unique_visitors_v4", 4, T0 + 3 * MIN, "run-4", T0 + 3 * MIN + 5),
        },
        version=4,
        run_id="run-4",
        stats={"events": 12},
        swapped_ms=T0 + 3 * MIN + 5,
        generation=4,
    )


def doc_with(**entry) -> bytes:
    """A per-view document whose one entry has `entry`'s fields."""
    doc = json.loads(per_view().to_doc())
    name = next(iter(doc["views"]))
    doc["views"][name].update(entry)
    return json.dumps(doc).encode()


def old_row(version: int, cutoff_ms: int, views: dict[str, str]) -> dict[bytes, bytes]:
    """A pointer row exactly as the single-cutoff code wrote it (one JSON value per `p:` column)."""
    doc = {
        "version": version,
        "cutoff_ms": cutoff_ms,
        "run_id": f"run-{version}",
        "views": views,
        "stats": {"events": 99},
        "swapped_ms": cutoff_ms + 7,
    }
    return {f"p:{k}".encode(): json.dumps(v).encode() for k, v in doc.items()}


def test_a_per_view_pointer_round_trips_through_its_document():
    pointer = per_view()
    doc = pointer.to_doc()
    back = Pointer.from_columns({DOC: doc})
    assert back == pointer
    assert back.stored == doc, "the bytes read are what a compare-and-set expects"
    assert back.source("unique_visitors").cutoff_ms == T0 + 3 * MIN
    assert back.source("page_views").table == "page_views_v1" and back.source("page_views").version == 1
    assert back.cutoff_of("top_pages") == 0 and back.source("top_pages").table is None
    assert back.cutoff_ms == T0, "the pointer-wide cutoff is the smallest view cutoff"
    assert back.views == {"page_views": "page_views_v1", "unique_visitors": "unique_visitors_v4"}
    assert back.cleanup_cutoffs_s() == {"page_views": T0 // 1000, "unique_visitors": (T0 + 3 * MIN) // 1000}


def test_an_old_single_cutoff_row_gives_every_view_that_cutoff():
    views = {"page_views": "page_views_v1", "top_pages": "top_pages_v1", "unique_visitors": "unique_visitors_v4"}
    pointer = Pointer.from_columns(old_row(4, T0 + MIN, views))
    assert pointer.stored is None and pointer.generation == 0
    assert pointer.version == 4 and pointer.run_id == "run-4" and pointer.stats == {"events": 99}
    assert {name: pointer.cutoff_of(name) for name in views} == dict.fromkeys(views, T0 + MIN)
    assert {name: pointer.entry(name).version for name in views} == {
        "page_views": 1,
        "top_pages": 1,
        "unique_visitors": 4,
    }
    assert pointer.views == views and pointer.tables() == set(views.values())


def test_the_document_wins_over_stale_legacy_columns():
    pointer = per_view()
    row = {**old_row(1, T0 - 10 * MIN, {"page_views": "page_views_v0"}), DOC: pointer.to_doc()}
    assert Pointer.from_columns(row) == pointer


def test_legacy_columns_tell_an_older_reader_the_smallest_cutoff_and_every_table():
    pointer = per_view()
    legacy = pointer.legacy_columns()
    assert set(legacy) == {b"p:version", b"p:cutoff_ms", b"p:run_id", b"p:views", b"p:stats", b"p:swapped_ms", HAS_DOC}
    old_code_reads = {k: v for k, v in legacy.items() if k != HAS_DOC}  # it takes every p: column as JSON
    assert json.loads(legacy[HAS_DOC]) is True
    seen_by_old_code = Pointer.from_columns(old_code_reads)
    assert seen_by_old_code.version == 4 and seen_by_old_code.cutoff_ms == T0
    assert seen_by_old_code.views == pointer.views


def test_a_row_that_lost_its_document_is_refused_rather_than_read_at_the_smallest_cutoff():
    """Each view has a cutoff of its own; the single-cutoff columns hold the smallest. Read from
    them, a view whose cutoff is later would add its realtime rows in between to a batch table
    that already counts them."""
    with pytest.raises(PointerFormatError, match="lost its document"):
        Pointer.from_columns(per_view().legacy_columns())


@pytest.mark.parametrize(
    "row",
    [
        {DOC: b"{not json"},
        {DOC: json.dumps({"format": 2, "views": {}}).encode()},  # no generation, no version
        {DOC: json.dumps({"format": 2, "generation": 1, "version": 1, "views": {"v": {"table": "v_v1"}}}).encode()},
        {b"p:run_id": b'"x"'},
        # What a stored row can hold that raised other errors (each a 500 on every query):
        {DOC: doc_with(cutoff_ms=1e400)},  # inf: OverflowError
        {DOC: doc_with(cutoff_ms=3_600_000 * 10**12)},  # no ISO text for it: ValueError in iso()
        {DOC: doc_with(swapped_ms=-5)},
        {DOC: b'{"views": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"},  # RecursionError
        {**old_row(3, 7_200_000, {"v": "v_v3"}), b"p:cutoff_ms": b"1e400"},
        {**old_row(3, 7_200_000, {"v": "v_v3"}), b"p:swapped_ms": b"99999999999999999999"},
        # A number that is not a whole one was cut to one silently (a cutoff 0.7 ms early):
        {DOC: doc_with(cutoff_ms=T0 + 0.7)},
        {DOC: doc_with(cutoff_ms=True)},
        {DOC: doc_with(version=1.5)},
        {DOC: json.dumps({**json.loads(per_view().to_doc()), "generation": 4.2}).encode()},
        {**old_row(3, 7_200_000, {"v": "v_v3"}), b"p:cutoff_ms": b"7200000.5"},
    ],
)
def test_an_unreadable_row_is_a_clear_error(row):
    with pytest.raises(PointerFormatError, match="pointer"):
        Pointer.from_columns(row)


def test_a_partial_run_moves_only_its_views_and_a_full_run_replaces_every_entry():
    current = per_view()
    stats = {"events": 20, "tables": {"page_views": {"rows": 3, "cells": 3, "checksum": 9}}}
    partial = advance(
        current,
        version=7,
        run_id="run-7",
        cutoff_ms=T0 + 5 * MIN,
        views=["page_views"],
        full=False,
        stats=stats,
        now_ms=T0 + 6 * MIN,
    )
    assert partial.generation == current.generation + 1 and partial.version == 7
    assert partial.entry("page_views") == ViewEntry(
        "page_views_v7", 7, T0 + 5 * MIN, "run-7", T0 + 6 * MIN, {"events": 20, "rows": 3, "cells": 3, "checksum": 9}
    )
    assert partial.entry("unique_visitors") == current.entry("unique_visitors")
    full = advance(
        partial,
        version=8,
        run_id="run-8",
        cutoff_ms=T0 + 5 * MIN,
        views=["page_views", "top_pages"],
        full=True,
        stats={},
        now_ms=T0 + 7 * MIN,
    )
    assert set(full.entries) == {"page_views", "top_pages"}, "a full run drops entries of undeclared views"
    assert {e.version for e in full.entries.values()} == {8}
    first = advance(None, version=1, run_id="r", cutoff_ms=T0, views=["a"], full=False, stats={}, now_ms=T0)
    assert first.generation == 1 and first.views == {"a": "a_v1"}


def test_no_view_goes_back_to_an_earlier_cutoff():
    with pytest.raises(CutoffError, match="unique_visitors"):
        advance(
            per_view(),
            version=9,
            run_id="r",
            cutoff_ms=T0 + MIN,
            views=["page_views", "unique_visitors"],
            full=False,
            stats={},
            now_ms=T0,
        )
    # a view behind the others may catch up to any cutoff past its own
    advance(
        per_view(), version=9, run_id="r", cutoff_ms=T0 + MIN, views=["page_views"], full=False, stats={}, now_ms=T0
    )


def test_a_swap_planned_against_another_generation_is_refused():
    current = per_view()
    check_unmoved(current, 4, version=9)
    check_unmoved(None, 0, version=1)
    for based_on in (3, 5, None):
        with pytest.raises(PointerMoved, match="the pointer moved since this run read it") as err:
            check_unmoved(current, based_on, version=9)
        assert "version 4 (run run-4)" in str(err.value) and "Nothing was changed" in str(err.value)


def test_table_versions_are_read_from_table_names():
    assert table_version("top_pages_v12") == 12
    assert table_version("page_views_by_country_device_v3") == 3
    assert table_version("meta") is None and table_version("x_vq") is None


def test_a_swap_is_not_refused_for_moves_that_leave_its_views_as_it_read_them():
    """Bookkeeping moves (realtime rows of a retired name deleted, a name marked retiring) and a
    swap of another view bump the generation, but leave what a partial run planned against as it
    was: its swap goes on (its full compute is not lost). A move of its own views, of an alias, or
    marking one of its views retiring still refuses it; a full run is refused by any entry's move."""
    from stores.pointer_moves import retiring_done, retiring_marked, run_basis, switch

    current = per_view()
    # As the run record keeps them: JSON.
    partial = json.loads(json.dumps(run_basis(current, ["page_views"], full=False)))
    whole = json.loads(json.dumps(run_basis(current, ["page_views", "unique_visitors"], full=True)))
    marked = retiring_marked(current, ["top_pages"], T0 + 9 * MIN)
    assert marked is not None and marked.generation == 5
    cleaned = retiring_done(marked, ["top_pages"], T0 + 10 * MIN)
    assert cleaned is not None and cleaned.generation == 6
    for moved in (marked, cleaned):
        check_unmoved(moved, 4, version=9, basis=partial)
        check_unmoved(moved, 4, version=9, basis=whole)
    other = advance(
        cleaned,
        version=8,
        run_id="r8",
        cutoff_ms=T0 + 4 * MIN,
        views=["unique_visitors"],
        full=False,
        stats={},
        now_ms=T0,
    )
    check_unmoved(other, 4, version=9, basis=partial)

    mine = advance(
        cleaned, version=8, run_id="r8", cutoff_ms=T0 + 4 * MIN, views=["page_views"], full=False, stats={}, now_ms=T0
    )
    own_retired = retiring_marked(current, ["page_views"], T0 + 9 * MIN)
    aliased = switch(mine, "page_views", "page_views", T0 + 11 * MIN)
    for moved, basis in ((mine, partial), (own_retired, partial), (aliased, partial), (other, whole), (marked, None)):
        with pytest.raises(PointerMoved, match="the pointer moved since this run read it"):
            check_unmoved(moved, 4, version=9, basis=basis)


def test_a_run_building_a_view_without_an_entry_keeps_the_strict_rule():
    """A view no entry served when the run planned may have been retired and its clean-up finished
    since (bookkeeping that leaves no trace in the basis): such a run swaps only on the generation it
    read. An alias moved meanwhile refuses a run too, and so does a basis that is not one."""
    from dataclasses import replace

    from stores.pointer_moves import retiring_done, retiring_marked, run_basis

    current = per_view()
    building = json.loads(json.dumps(run_basis(current, ["page_views", "top_pages"], full=False)))
    marked = retiring_marked(current, ["top_pages"], T0 + 9 * MIN)
    cleaned = retiring_done(marked, ["top_pages"], T0 + 10 * MIN)
    assert run_basis(cleaned, ["page_views", "top_pages"], full=False) == building  # no trace left
    with pytest.raises(PointerMoved):
        check_unmoved(cleaned, 4, version=9, basis=building)
    check_unmoved(current, 4, version=9, basis=building)  # unmoved: it swaps

    partial = run_basis(current, ["page_views"], full=False)
    aliased = replace(current, aliases={"unique_visitors": "unique_visitors~2"}, generation=5)
    with pytest.raises(PointerMoved):
        check_unmoved(aliased, 4, version=9, basis=partial)
    for hostile in ([1], "x", {"views": "page_views", "full": False}):
        with pytest.raises(PointerMoved):
            check_unmoved(marked, 4, version=9, basis=hostile)  # type: ignore[arg-type]


def test_the_pointer_keeps_a_runs_figures_but_not_its_verification_cuts():
    """The API reads the pointer document on every refresh: the run's cuts (up to 15 row keys of up
    to 256 bytes per view) serve only verification, which reads them from the run record."""
    stats = {
        "events": 7,
        "tables": {"page_views": {"rows": 2, "cells": 3, "checksum": 9}},
        "splits": {"page_views": ["ab" * 256] * 15},
        "seconds": 1.5,
    }
    moved = advance(None, version=2, run_id="r", cutoff_ms=T0, views=["page_views"], full=True, stats=stats, now_ms=T0)
    doc = json.loads(moved.to_doc())
    legacy = b"".join(moved.legacy_columns().values())
    assert "splits" not in json.dumps(doc) and b"ab" * 256 not in legacy and b'"events": 7' in legacy
    assert moved.stats == {k: v for k, v in stats.items() if k != "splits"}
    assert moved.entries["page_views"].stats == {"events": 7, "rows": 2, "cells": 3, "checksum": 9}
    assert stats["splits"]  # the run's own record keeps them
