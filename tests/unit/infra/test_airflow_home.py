"""Airflow's components prepare its home as they start: a view module that no longer imports kept
every one of them down, and three writers of the DAG's views file at once met on one temporary
name (no service)."""

from __future__ import annotations

import json
import threading

import pytest

from infra.airflow import prepare_home, views_file


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
