"""At the switch, an answer comes from one definition, and never from the old one after the new."""

from __future__ import annotations

from dataclasses import replace

import pytest

from definitions.view_versions import resolve, storage_name
from definitions.views import PAGE_VIEWS, Registry, View
from serving_layer.switching import Switched, answering_view
from stores.pointer import CutoffError, Pointer, ViewEntry
from stores.pointer_moves import switch

FILTERED = replace(PAGE_VIEWS, where="event_type = 'page_view' AND device = 'mobile'")
NEW = storage_name("page_views", FILTERED.fingerprint)


def entry(table: str) -> ViewEntry:
    return ViewEntry(table, 1, 60_000)


def during_the_change(declared: View = FILTERED):
    old = View.from_shape("page_views", PAGE_VIEWS.shape())
    return resolve(Registry((declared,)), {}, {"page_views": old})


def test_before_the_switch_the_old_definition_answers():
    versions = during_the_change()
    route = versions.served["page_views"]
    pointer = Pointer({"page_views": entry("page_views_v1"), NEW: entry(f"{NEW}_v2")})
    assert answering_view(versions, route, pointer, "minute") is route


def test_after_the_switch_the_new_definition_answers_the_old_route():
    versions = during_the_change()
    route = versions.served["page_views"]
    before = Pointer({"page_views": entry("page_views_v1"), NEW: entry(f"{NEW}_v2")})
    after = switch(before, "page_views", NEW, 1)
    assert after.generation == before.generation + 1 and after.aliases == {"page_views": NEW}
    assert answering_view(versions, route, after, "minute").name == NEW


def test_a_route_that_cannot_answer_the_new_definition_is_refused_with_a_retry():
    keyed = replace(PAGE_VIEWS, keys=("url", "device"))
    versions = during_the_change(keyed)
    new = versions.pending["page_views"].name
    pointer = switch(Pointer({"page_views": entry("page_views_v1"), new: entry(f"{new}_v2")}), "page_views", new, 1)
    with pytest.raises(Switched, match="switched to its new definition"):
        answering_view(versions, versions.served["page_views"], pointer, "minute")


def test_a_granularity_the_new_definition_does_not_keep_is_refused():
    hourly = replace(FILTERED, granularities=("hour",))
    versions = during_the_change(hourly)
    new = versions.pending["page_views"].name
    pointer = switch(Pointer({"page_views": entry("page_views_v1"), new: entry(f"{new}_v2")}), "page_views", new, 1)
    route = versions.served["page_views"]
    assert answering_view(versions, route, pointer, "hour").name == new
    with pytest.raises(Switched):
        answering_view(versions, route, pointer, "minute")


def test_the_switch_needs_a_batch_table_of_the_new_definition():
    with pytest.raises(CutoffError, match="no batch table"):
        switch(Pointer({"page_views": entry("page_views_v1")}), "page_views", NEW, 1)


def test_aliases_survive_storage_and_every_later_move():
    from stores.pointer_moves import advance, retire

    pointer = switch(Pointer({"page_views": entry("page_views_v1"), NEW: entry(f"{NEW}_v2")}), "page_views", NEW, 5)
    read = Pointer.from_doc(pointer.to_doc())
    assert read.aliases == {"page_views": NEW} and read == pointer
    moved = advance(read, version=3, run_id="r", cutoff_ms=120_000, views=[NEW], full=False, stats={}, now_ms=6)
    assert moved.aliases == {"page_views": NEW}
    assert retire(moved, ["page_views"], 7).aliases == {"page_views": NEW}
    assert retire(moved, [NEW], 7).aliases == {}, "an alias to a retired storage name goes with it"
    back = switch(moved, "page_views", "page_views", 8)
    assert back.aliases == {}, "an alias to the view's own name is no alias"
    assert b"aliases" not in Pointer({"a": entry("a_v1")}).to_doc(), "a pointer without aliases is stored as before"


def test_a_route_made_without_the_stores_is_answered_by_the_definition_stored_under_its_name():
    """The API read the views while HDFS was down: its route for page_views was made from the new
    declaration but under the old storage name. Once the versions are made with the marker, that
    route is answered by the old definition stored there, never by the new declaration."""
    blind = resolve(Registry((FILTERED,)), {}, None)
    route = blind.served["page_views"]
    assert route.name == "page_views" and route.fingerprint == FILTERED.fingerprint
    pointer = Pointer({"page_views": entry("page_views_v1")})
    answering = answering_view(during_the_change(), route, pointer, "minute")
    assert answering.name == "page_views" and answering.fingerprint == PAGE_VIEWS.fingerprint
    keyed = resolve(Registry((replace(PAGE_VIEWS, keys=("url", "device")),)), {}, None).served["page_views"]
    with pytest.raises(Switched):  # its parameters cannot ask the stored definition: retry, routes remade
        answering_view(during_the_change(), keyed, pointer, "minute")


def test_retiring_storage_names_are_kept_until_their_rows_are_deleted():
    from stores.pointer_moves import advance, retire, retiring_done, retiring_marked

    before = Pointer({"page_views": entry("page_views_v1"), NEW: entry(f"{NEW}_v2")})
    switched = switch(before, "page_views", NEW, 1)
    assert switched.retiring == ("page_views",), "the definition switched away from"
    partial = advance(switched, version=3, run_id="r", cutoff_ms=120_000, views=[NEW], full=False, stats={}, now_ms=2)
    assert partial.retiring == ("page_views",) and partial.entry("page_views") is not None
    retired = retire(partial, ["page_views"], 3)
    assert retired.entry("page_views") is None and retired.retiring == ("page_views",)
    assert Pointer.from_doc(retired.to_doc()).retiring == ("page_views",)
    assert retiring_done(retired, ["page_views"], 4).retiring == ()
    assert retiring_done(retired, ["other"], 4) is None, "nothing to take off: the pointer does not move"
    assert retiring_marked(retired, ["page_views"], 5) is None, "already retiring"
    assert retiring_marked(retired, ["other"], 5).retiring == ("other", "page_views")


def test_a_full_run_retires_what_it_dropped_and_the_aliases_to_it():
    from stores.pointer_moves import advance

    removed = switch(Pointer({"page_views": entry("page_views_v1"), NEW: entry(f"{NEW}_v2")}), "page_views", NEW, 1)
    full = advance(removed, version=3, run_id="r", cutoff_ms=120_000, views=["other"], full=True, stats={}, now_ms=2)
    assert set(full.retiring) == {"page_views", NEW} and full.aliases == {}
    again = advance(full, version=4, run_id="r", cutoff_ms=180_000, views=[NEW], full=False, stats={}, now_ms=3)
    assert again.retiring == ("page_views",), "a storage name written again is live, not retiring"


def test_a_full_run_keeps_what_the_speed_layer_still_maintains():
    """A view dropped from its module but not yet applied (or put back before an apply) is still
    maintained by the speed layer and answered by the API: a full run that no longer computes it
    leaves its entry and alias as they were (`lambdactl views apply` retires it), never half a view."""
    from stores.pointer_moves import advance

    switched = switch(Pointer({"page_views": entry("page_views_v1"), NEW: entry(f"{NEW}_v2")}), "page_views", NEW, 1)
    kept = advance(
        switched,
        version=3,
        run_id="r",
        cutoff_ms=120_000,
        views=["other"],
        full=True,
        stats={},
        now_ms=2,
        maintained=[NEW, "other"],
    )
    assert kept.entry(NEW) == switched.entry(NEW) and kept.aliases == {"page_views": NEW}
    assert kept.entry("page_views") is None and kept.retiring == ("page_views",), (
        "what the speed layer no longer maintains loses its entry as before"
    )
    assert kept.entry("other").version == 3
    unknown = advance(
        switched,
        version=3,
        run_id="r",
        cutoff_ms=120_000,
        views=["other"],
        full=True,
        stats={},
        now_ms=2,
        maintained=None,
    )
    assert set(unknown.entries) == {"page_views", NEW, "other"} and unknown.retiring == switched.retiring, (
        "a marker that lists no views (older code): nothing is known to be unmaintained, every entry stays"
    )


def test_a_retiring_name_a_replay_holds_keeps_its_rows_until_a_later_clean_up():
    from stores.pointer_moves import retire, retiring_now

    switched = switch(Pointer({"page_views": entry("page_views_v1"), NEW: entry(f"{NEW}_v2")}), "page_views", NEW, 1)
    assert retiring_now(switched, maintained=[], replaying=[]) == ([], []), "its entry still serves"
    retired = retire(switched, ["page_views"], 3)
    assert retiring_now(retired, maintained=[], replaying=[]) == (["page_views"], [])
    assert retiring_now(retired, maintained=[], replaying=["page_views"]) == ([], []), "the replay still writes it"
    assert retiring_now(retired, maintained=["page_views"], replaying=[]) == ([], ["page_views"]), "maintained again"
