"""Which definition answers a view, which is built to replace it, and what both layers compute."""

from __future__ import annotations

from dataclasses import replace

import pytest

from definitions.view_versions import resolve, storage_name
from definitions.views import BUILT_IN, PAGE_VIEWS, PAGE_VIEWS_BY_CHANNEL, Registry, View

CHANGED = replace(PAGE_VIEWS, where="event_type = 'page_view' AND device = 'mobile'")


def recorded(*views: View) -> dict[str, View]:
    return {v.name: View.from_shape(v.name, v.shape()) for v in views}


@pytest.mark.parametrize("view", list(BUILT_IN))
def test_a_recorded_shape_reads_back_as_the_same_definition(view):
    again = View.from_shape("elsewhere", view.shape())
    assert again.fingerprint == view.fingerprint
    assert replace(again, name=view.name, description=view.description) == view


@pytest.mark.parametrize("shape", [{}, {"aggregation": "median"}, {"aggregation": "count"}, [], "x"])
def test_a_shape_that_is_no_definition_is_a_value_error(shape):
    with pytest.raises(ValueError, match="recorded definition cannot be read"):
        View.from_shape("v", shape)


def test_unchanged_views_are_computed_and_served_under_their_own_names():
    versions = resolve(BUILT_IN, {}, recorded(*BUILT_IN))
    assert versions.maintained.names() == BUILT_IN.names()
    assert {n: v.name for n, v in versions.served.items()} == {n: n for n in BUILT_IN.names()}
    assert not versions.pending and not versions.unresolved


def test_a_changed_declaration_is_built_beside_the_definition_that_keeps_answering():
    declared = Registry((CHANGED, PAGE_VIEWS_BY_CHANNEL))
    versions = resolve(declared, {}, recorded(PAGE_VIEWS, PAGE_VIEWS_BY_CHANNEL))
    new = storage_name("page_views", CHANGED.fingerprint)
    assert versions.served["page_views"].name == "page_views"
    assert versions.served["page_views"].fingerprint == PAGE_VIEWS.fingerprint, "the old definition answers"
    assert versions.pending["page_views"].name == new
    assert versions.pending["page_views"].fingerprint == CHANGED.fingerprint
    assert versions.maintained.names() == ["page_views", new, "page_views_by_channel"]
    assert versions.public(new) == "page_views" == versions.public("page_views")
    assert versions.storages(["page_views"]) == ["page_views", new]
    assert versions.storages([new]) == [new]
    with pytest.raises(KeyError):
        versions.storages(["nope"])


def test_after_the_switch_only_the_new_definition_is_computed():
    new = storage_name("page_views", CHANGED.fingerprint)
    versions = resolve(Registry((CHANGED,)), {"page_views": new}, recorded(PAGE_VIEWS, replace(CHANGED, name=new)))
    assert versions.maintained.names() == [new]
    assert versions.served["page_views"].name == new and not versions.pending
    assert versions.public("page_views") == "page_views", "the old storage name belongs to the view"


def test_a_second_change_builds_from_the_storage_that_answers_now():
    first = storage_name("page_views", CHANGED.fingerprint)
    again = replace(CHANGED, granularities=("hour", "day"))
    versions = resolve(Registry((again,)), {"page_views": first}, recorded(replace(CHANGED, name=first)))
    second = storage_name("page_views", again.fingerprint)
    assert versions.maintained.names() == [first, second]
    assert versions.served["page_views"].name == first and versions.pending["page_views"].name == second
    assert versions.public(second) == "page_views"


def test_a_description_alone_is_no_change():
    described = replace(PAGE_VIEWS, description="something else")
    versions = resolve(Registry((described,)), {}, recorded(PAGE_VIEWS))
    assert not versions.pending and versions.served["page_views"].description == "something else"


def test_a_view_new_to_the_speed_layer_is_computed_as_declared():
    versions = resolve(Registry((CHANGED,)), {}, {})
    assert versions.maintained.names() == ["page_views"] and not versions.pending


def test_a_change_whose_served_definition_is_unknown_is_refused_not_guessed():
    versions = resolve(Registry((CHANGED, PAGE_VIEWS_BY_CHANNEL)), {}, None, {"page_views": PAGE_VIEWS.fingerprint})
    assert versions.unresolved == ("page_views",)
    assert versions.maintained.names() == ["page_views_by_channel"], "no layer computes it"
    assert versions.served["page_views"].fingerprint == CHANGED.fingerprint, "its route stays, to refuse"
    same = resolve(Registry((PAGE_VIEWS,)), {}, None, {"page_views": PAGE_VIEWS.fingerprint})
    assert not same.unresolved and same.maintained.names() == ["page_views"]


def test_a_declared_view_name_with_the_storage_separator_is_refused(tmp_path):
    """`__` separates a view's name from its definition's in storage names: a declared `a__b` could be
    taken for a definition of view `a`."""
    from definitions.settings import Settings
    from definitions.view_loading import load_views

    (tmp_path / "separated_views.py").write_text(
        "from definitions.views import View\n"
        "VIEWS = [View(name='page_views__1234abcd', keys=('url',), aggregation='count', granularities=('hour',))]\n"
    )
    settings = Settings(state_dir=tmp_path, views={"modules": ["separated_views"], "paths": [str(tmp_path)]})
    with pytest.raises(ValueError, match="may not contain '__'"):
        load_views(settings, reload=True)


def test_a_view_with_a_name_of_the_longest_allowed_length_can_change_its_definition():
    """Storage names add `__` and up to 16 hex digits to the view's name: a 64-character view failed
    every layer once its definition changed, naming a view nobody declared."""
    from definitions.views import MAX_NAME_CHARS

    old = replace(PAGE_VIEWS, name="v" * MAX_NAME_CHARS)
    changed = replace(CHANGED, name=old.name)
    versions = resolve(Registry((changed,)), {}, recorded(old))
    assert versions.pending[old.name].name == storage_name(old.name, changed.fingerprint)
    collided = storage_name(old.name, changed.fingerprint)  # a fingerprint prefix collision: all 16 digits
    versions = resolve(Registry((changed,)), {old.name: collided}, {collided: replace(old, name=collided)})
    assert versions.pending[old.name].name == f"{old.name}__{changed.fingerprint}"
    with pytest.raises(ValueError, match="at most 64 characters"):
        View(name="v" * (MAX_NAME_CHARS + 1), keys=("url",), aggregation="count")
