"""How the recompute route names the run it queues (the route's own logic; the integration test
tests/integration/airflow/test_dags.py sends six requests at once to the real Airflow): requests
that saw the same latest run name the same run, so Airflow takes one; a run of that id that has
ended already (the latest run deleted and made again) moves the name along the chain."""

from __future__ import annotations

import pytest

from api.routes import admin
from definitions.settings import Settings
from stores import airflow


class Airflow:
    """Airflow's runs as the route sees them: {run id: state}, the latest one last."""

    def __init__(self, runs: dict[str, str]) -> None:
        self.runs_by_id = dict(runs)
        self.triggered: list[str] = []

    def __call__(self, settings, timeout_s, deadline_s=None):  # the AirflowClient constructor
        self.deadline_s = deadline_s
        return self

    def runs(self, dag_id, states):
        return [{"dag_run_id": r} for r, s in self.runs_by_id.items() if s in states]

    def dag(self, dag_id):
        return {"is_paused": False}

    def latest_run(self, dag_id):
        return {"dag_run_id": list(self.runs_by_id)[-1]} if self.runs_by_id else None

    def run(self, dag_id, run_id):
        return {"state": self.runs_by_id[run_id]}

    def trigger(self, dag_id, conf, run_id=None):
        if run_id in self.runs_by_id:
            raise airflow.AirflowConflict("409")
        self.runs_by_id[run_id] = "queued"
        self.triggered.append(run_id)
        return run_id

    def close(self):
        pass


def trigger(monkeypatch, fake: Airflow) -> str:
    monkeypatch.setattr(airflow, "AirflowClient", fake)
    return admin._trigger_one(Settings(), admin.RecomputeRequest())


def test_a_request_names_its_run_after_the_latest_and_one_seeing_the_same_latest_is_refused(monkeypatch):
    fake = Airflow({"scheduled__1": "success"})
    first = trigger(monkeypatch, fake)
    assert first == admin.next_run_id("scheduled__1")
    fake.runs_by_id = {"scheduled__1": "success", first: "running"}
    fake.latest_run = lambda dag_id: {"dag_run_id": "scheduled__1"}  # listed just before the first was made
    with pytest.raises(admin.NotNow, match="just triggered"):
        trigger(monkeypatch, fake)
    assert fake.triggered == [first]


def test_a_name_taken_by_a_run_that_ended_moves_along_the_chain(monkeypatch):
    taken = admin.next_run_id("scheduled__1")
    fake = Airflow({taken: "success", "scheduled__1": "failed"})  # scheduled__1 deleted and made again
    assert trigger(monkeypatch, fake) == admin.next_run_id(taken)
    assert fake.triggered == [admin.next_run_id(taken)]


def test_no_run_yet_names_the_first_run(monkeypatch):
    assert trigger(monkeypatch, Airflow({})) == admin.next_run_id("")


def test_a_run_made_between_a_requests_checks_and_its_naming_is_still_the_one_run(monkeypatch):
    """Seen on the real Airflow (CI): request B checked that no run waited, request A's run was made,
    then B read the latest run (A's) and named a run of its own after it: two runs queued."""
    fake = Airflow({"scheduled__1": "success"})
    a_run = admin.next_run_id("scheduled__1")
    listed = fake.runs

    def runs_then_a_lands(dag_id, states):
        answer = listed(dag_id, states)
        fake.runs_by_id[a_run] = "queued"  # A's trigger lands just after B's check
        return answer

    fake.runs = runs_then_a_lands  # type: ignore[method-assign]
    with pytest.raises(admin.NotNow):
        trigger(monkeypatch, fake)
    assert fake.triggered == [], "B queued no run of its own"


def test_a_request_while_another_triggers_on_this_host_is_refused_without_asking_airflow(monkeypatch, tmp_path):
    """Airflow's SQLite-backed API answered two simultaneous reads of the latest run differently (seen
    in CI), so two requests named two runs. The API's workers share a host: one request at a time
    triggers, and one arriving meanwhile is a 409 before it reads anything."""
    from definitions.files import state_lock

    fake = Airflow({"scheduled__1": "success"})
    monkeypatch.setattr(airflow, "AirflowClient", fake)
    settings = Settings(state_dir=tmp_path)
    with state_lock(tmp_path, admin.TRIGGER_LOCK, "a recompute request"):
        with pytest.raises(admin.NotNow, match="another recompute request"):
            admin._trigger(settings, admin.RecomputeRequest())
    assert fake.triggered == []
    assert admin._trigger(settings, admin.RecomputeRequest()) == admin.next_run_id("scheduled__1")


def test_a_state_directory_the_api_cannot_write_is_named_as_the_cause_not_airflow(monkeypatch, tmp_path):
    fake = Airflow({"scheduled__1": "success"})
    monkeypatch.setattr(airflow, "AirflowClient", fake)
    blocked = tmp_path / "a-file-not-a-directory"
    blocked.write_text("")
    with pytest.raises(admin.NoLock, match="Error"):
        admin._trigger(Settings(state_dir=blocked), admin.RecomputeRequest())
    assert fake.triggered == []


def test_the_route_bounds_all_its_airflow_calls_by_one_budget(monkeypatch):
    """Up to ten calls of 15 s each held the route's lock for minutes while Airflow was slow."""
    fake = Airflow({"scheduled__1": "success"})
    trigger(monkeypatch, fake)
    assert fake.deadline_s == admin.TRIGGER_BUDGET_S <= 30
