"""`lambdactl report --version N --reuse` (the DAG's report task): a retry of a task whose first
attempt stored the report (and was then killed, or timed out) names that report again instead of
building a second one of the same run, which the list would show twice. The stored reports are files
under state_dir here; building one is a stand-in that must not be reached."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import lambdactl.report as report


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

    monkeypatch.setattr(reports.build, "window_for_version", lambda _s, version: window(version))
    monkeypatch.setattr(reports.build, "produce", produce)
    monkeypatch.setattr("definitions.spark.spark_session", lambda *_a, **_k: None)
    return chosen, folder, built


def window(version: int):
    """The window of version `version`'s run, as its run record gives it."""
    from reports.build import Window

    return Window(1_000 * version, 1_000 * (version + 1), version, f"run-{version}")


def _store(folder, rid: str, version: int, **doc) -> None:
    w = window(version)
    made = {"version": version, "run_id": w.run_id, "window": {"start_ms": w.start_ms, "end_ms": w.end_ms}}
    (folder / f"{rid}.json").write_text(json.dumps({"id": rid, **made, **doc}))
    (folder / f"{rid}.html").write_text("<html></html>")


def test_reuse_names_the_stored_report_of_the_version_and_builds_none(stored, capsys):
    chosen, folder, built = stored
    _store(folder, "20261202T000000Z-aaaaaaaa", 7)
    _store(folder, "20261202T000500Z-bbbbbbbb", 8)
    assert report.cmd_report(chosen, SimpleNamespace(version=7, reuse=True, json=True, limit=20)) == 0
    assert built == []
    said = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert said["id"] == "20261202T000000Z-aaaaaaaa" and said["json"].endswith("20261202T000000Z-aaaaaaaa.json")


def test_reuse_builds_the_report_when_none_of_the_version_is_stored_and_without_it_always(stored, capsys):
    chosen, folder, built = stored
    _store(folder, "20261202T000000Z-aaaaaaaa", 7)
    assert report.cmd_report(chosen, SimpleNamespace(version=9, reuse=True, json=True, limit=20)) == 0
    assert report.cmd_report(chosen, SimpleNamespace(version=7, reuse=False, json=True, limit=20)) == 0
    assert built == [window(9), window(7)]


@pytest.mark.parametrize(
    "other",
    [
        {"run_id": "adhoc", "window": {"start_ms": 0, "end_ms": 8_000}},  # `python -m reports --version 7`
        {"window": {"start_ms": 6_000, "end_ms": 8_000}},  # another window of the version's run
        {"speed_layer": {"caught_up": False}},  # built while the speed layer was behind
    ],
)
def test_reuse_builds_anew_unless_the_stored_report_is_of_the_runs_window_with_the_speed_layer_caught_up(
    stored, capsys, other
):
    """Matched by version alone, an ad-hoc report of the version (another window), or one built
    while the speed layer had not processed the window, was named as the run's; the DAG then cleans
    the window's realtime rows, and the run's own report can never be built."""
    chosen, folder, built = stored
    _store(folder, "20261202T000000Z-aaaaaaaa", 7, **other)
    assert report.cmd_report(chosen, SimpleNamespace(version=7, reuse=True, json=True, limit=20)) == 0
    assert built == [window(7)]
    said = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert said["id"] == "20261202T010000Z-new" and not said.get("reused")
