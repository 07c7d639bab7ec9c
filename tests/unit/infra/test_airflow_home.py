"""Airflow's components prepare its home as they start: a view module that no longer imports kept
every one of them down, and three writers of the DAG's views file at once met on one temporary
name (no service)."""

from __future__ import annotations

import json
import os
import threading

import pytest

from infra.airflow import RETIRED_KEPT, prepare_home, views_file, write_declared_views


@pytest.fixture
def home(settings, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path / "views"))
    (tmp_path / "views").mkdir()
    (tmp_path / "views" / "broken_views_mod.py").write_text("VIEWS = [\n")  # a syntax error
    return settings.model_copy(update={"state_dir": tmp_path / "state"})


def test_a_view_module_that_does_not_import_leaves_the_names_written_before(home, caplog):
    prepare_home(home)
    written = json.loads(views_file(home).read_text())["views"]
    assert "page_views" in written
    broken = home.model_copy(update={"views": home.views.model_copy(update={"modules": ["broken_views_mod"]})})
    prepare_home(broken)  # no exception: the component starts
    assert json.loads(views_file(home).read_text())["views"] == written
    assert "cannot be loaded" in caplog.text


def test_components_preparing_at_once_each_replace_the_file_whole(home):
    errors: list[BaseException] = []

    def prepare() -> None:
        try:
            for _ in range(30):
                prepare_home(home)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=prepare) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert "page_views" in json.loads(views_file(home).read_text())["views"]


def test_a_name_no_longer_declared_is_kept_as_retired_until_declared_again(home):
    """A run triggered naming a view that is removed before its next task starts: Airflow checks the
    run's params against the DAG's enum before any of the DAG's code. The enum keeps the retired
    names, so the run reaches `lambdactl`, which refuses it naming why (the task's failure cause)."""
    write_declared_views(home, ["page_views", "clicks", "sessions"])
    write_declared_views(home, ["page_views"])
    written = json.loads(views_file(home).read_text())
    assert written == {"views": ["page_views"], "retired": ["clicks", "sessions"]}
    write_declared_views(home, ["page_views", "sessions"])
    assert json.loads(views_file(home).read_text()) == {"views": ["page_views", "sessions"], "retired": ["clicks"]}


def test_the_retired_names_kept_are_bounded_the_latest_first(home):
    for n in range(RETIRED_KEPT + 30):
        write_declared_views(home, [f"v{n}"])
    retired = json.loads(views_file(home).read_text())["retired"]
    assert len(retired) == RETIRED_KEPT
    assert retired[0] == f"v{RETIRED_KEPT + 28}" and f"v{RETIRED_KEPT + 29}" not in retired


def test_a_views_file_holding_anything_else_is_written_afresh(home):
    views_file(home).parent.mkdir(parents=True, exist_ok=True)
    for junk in ("[", '{"views": 3, "retired": {"a": 1}}', '{"retired": ["x", 7, "bad name"]}', "\x00"):
        views_file(home).write_text(junk)
        write_declared_views(home, ["page_views"])
        written = json.loads(views_file(home).read_text())
        assert written["views"] == ["page_views"] and set(written["retired"]) <= {"x"}, written


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder another user's takes root")
def test_a_home_another_user_made_is_refused_at_each_start(home, tmp_path):
    """`lambdactl up` checks `airflow.home` only where it exists; one outside the state directory
    (/tmp/…, after a reboot) that another user made first was taken as it was at each component's
    start: Airflow imports `config/airflow_local_settings.py` from it and reads its `airflow.cfg`
    (the secret its API tokens are signed with)."""
    elsewhere = tmp_path / "airflow-home"
    elsewhere.mkdir()
    os.chown(elsewhere, 4242, 4242)
    settings = home.model_copy(update={"airflow": home.airflow.model_copy(update={"home": str(elsewhere)})})
    with pytest.raises(ValueError, match=r"airflow\.home: .*another user"):
        prepare_home(settings)
    assert not views_file(settings).exists(), "nothing was written into it"
