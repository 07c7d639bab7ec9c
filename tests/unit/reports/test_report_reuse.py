"""`lambdactl report --version N --reuse` (the DAG's report task): a retry of a task whose first
attempt stored the report (and was then killed, or timed out) names that report again instead of
building a second one of the same run, which the list would show twice. The stored reports are files
under state_dir here; building one is a stand-in that must not be reached."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import lambdactl.batch as batch


@pytest.fixture
def stored(settings, tmp_path, monkeypatch):
    import reports.build

    chosen = settings.model_copy(update={"state_dir": tmp_path})
    folder = tmp_path / "reports"
    folder.mkdir()
    built: list = []

    def produce(_settings, _spark, window):
        built.append(window)
        return {"id": "20261202T010000Z-new"}, {"json": "new.json"}

    monkeypatch.setattr(reports.build, "window_for_version", lambda _s, version: {"version": version})
    monkeypatch.setattr(reports.build, "produce", produce)
    monkeypatch.setattr("definitions.spark.spark_session", lambda *_a, **_k: None)
    return chosen, folder, built


def _store(folder, rid: str, version: int) -> None:
    (folder / f"{rid}.json").write_text(json.dumps({"id": rid, "version": version}))
    (folder / f"{rid}.html").write_text("<html></html>")


def test_reuse_names_the_stored_report_of_the_version_and_builds_none(stored, capsys):
    chosen, folder, built = stored
    _store(folder, "20261202T000000Z-aaaaaaaa", 7)
    _store(folder, "20261202T000500Z-bbbbbbbb", 8)
    assert batch.cmd_report(chosen, SimpleNamespace(version=7, reuse=True, json=True, limit=20)) == 0
    assert built == []
    said = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert said["id"] == "20261202T000000Z-aaaaaaaa" and said["json"].endswith("20261202T000000Z-aaaaaaaa.json")


def test_reuse_builds_the_report_when_none_of_the_version_is_stored_and_without_it_always(stored, capsys):
    chosen, folder, built = stored
    _store(folder, "20261202T000000Z-aaaaaaaa", 7)
    assert batch.cmd_report(chosen, SimpleNamespace(version=9, reuse=True, json=True, limit=20)) == 0
    assert batch.cmd_report(chosen, SimpleNamespace(version=7, reuse=False, json=True, limit=20)) == 0
    assert built == [{"version": 9}, {"version": 7}]
