"""What `GET /api/v1/views` and `lambdactl status` say of a view during a change of its definition."""

from __future__ import annotations

from dataclasses import replace

from definitions.view_versions import resolve, storage_name
from definitions.views import PAGE_VIEWS, Registry, View
from serving_layer.view_states import view_states
from stores.pointer import Pointer, ViewEntry
from stores.view_lifecycle import Lifecycle

CHANGED = replace(PAGE_VIEWS, where="event_type = 'page_view' AND device = 'mobile'")
NEW = storage_name("page_views", CHANGED.fingerprint)
POINTER = Pointer({"page_views": ViewEntry("page_views_v1", 1, 60_000)})


def fresh(name: str, source) -> None:
    return None


def test_a_view_being_changed_is_listed_once_serving_with_its_new_definitions_state():
    versions = resolve(Registry((CHANGED,)), {}, {"page_views": View.from_shape("page_views", PAGE_VIEWS.shape())})
    lives = [
        Lifecycle("page_views", "serving", 0, 60_000),
        Lifecycle(NEW, "building", 120_000, None, "no batch table yet"),
    ]
    states = view_states(versions, lives, POINTER, fresh)
    assert [(s.name, s.state, s.storage) for s in states] == [("page_views", "serving", "page_views")]
    assert states[0].changing == f"its new definition ({NEW}) is building: no batch table yet"
    assert states[0].version == 1 and states[0].cutoff_ms == 60_000


def test_after_the_switch_the_view_is_its_new_storage_and_the_old_one_a_previous_definition():
    pointer = Pointer(
        {"page_views": ViewEntry("page_views_v1", 1, 60_000), NEW: ViewEntry(f"{NEW}_v2", 2, 180_000)},
        aliases={"page_views": NEW},
    )
    versions = resolve(Registry((CHANGED,)), pointer.aliases, {NEW: View.from_shape(NEW, CHANGED.shape())})
    lives = [Lifecycle(NEW, "serving", 120_000, 180_000), Lifecycle("page_views", "retired", None, 60_000)]
    states = view_states(versions, lives, pointer, fresh)
    assert [(s.name, s.state, s.storage, s.version) for s in states] == [
        ("page_views", "serving", NEW, 2),
        ("page_views (previous definition)", "retired", "page_views", 1),
    ]


def test_a_view_whose_served_definition_is_unknown_is_building_with_the_reason():
    versions = resolve(Registry((CHANGED,)), {}, None, {"page_views": PAGE_VIEWS.fingerprint})
    states = view_states(versions, [], POINTER, fresh)
    assert [(s.name, s.state) for s in states] == [("page_views", "building")]
    assert "recorded only its fingerprint" in states[0].reason
