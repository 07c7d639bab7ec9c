"""Airflow's history on the real stack: the lambda_housekeeping DAG, run through Airflow's REST API,
deletes the task logs and run records older than `airflow.keep_history_days` and keeps the newer; its
other task compacts the master dataset (tests/integration/batch/test_master_compaction.py: how)."""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import closing

import pytest

from infra.airflow import airflow_home
from infra.airflow_housekeeping import log_folder
from stores.airflow import AirflowClient

DAG_ID = "lambda_housekeeping"


def _aged(path, days: float) -> None:
    when = time.time() - days * 86_400
    os.utime(path, (when, when))


def _database(settings):
    if settings.airflow.database_url.get_secret_value():
        pytest.skip("Airflow's database is not the local SQLite file")
    return closing(sqlite3.connect(airflow_home(settings) / "airflow.db", timeout=30))


def _audit_rows(settings, event: str) -> int:
    with _database(settings) as db:
        return db.execute("SELECT count(*) FROM log WHERE event = ?", (event,)).fetchone()[0]


def test_the_dag_deletes_the_history_older_than_kept_and_only_that(settings, stack, tmp_path):
    keep = settings.airflow.keep_history_days
    logs = log_folder(settings)
    old_run = logs / f"dag_id={DAG_ID}_probe" / "run_id=old" / "task_id=t"
    new_run = logs / f"dag_id={DAG_ID}_probe" / "run_id=new" / "task_id=t"
    for folder in (old_run, new_run):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "attempt=1.log").write_text("a task's log\n")
    _aged(old_run / "attempt=1.log", keep + 10)
    for folder in (old_run, old_run.parent):
        _aged(folder, keep + 10)
    # An audit-log row from before the horizon, and one from now: only the first may go.
    old_event, new_event = f"probe-old-{time.time_ns()}", f"probe-new-{time.time_ns()}"
    with _database(settings) as db:
        db.execute(
            "INSERT INTO log (dttm, event, owner) VALUES (datetime('now', ?), ?, 'tests')",
            (f"-{keep + 10} days", old_event),
        )
        db.execute("INSERT INTO log (dttm, event, owner) VALUES (datetime('now'), ?, 'tests')", (new_event,))
        db.commit()
        batch_runs = db.execute("SELECT count(*) FROM dag_run WHERE dag_id = ?", (settings.airflow.dag_id,)).fetchone()

    client = AirflowClient(settings)
    try:
        client.unpause(DAG_ID)
        run_id = client.trigger(DAG_ID, {})
        run = client.wait(DAG_ID, run_id, timeout_s=600)
        log = client.task_log(DAG_ID, run_id, "housekeeping")
        compacted = client.task_log(DAG_ID, run_id, "compact_master")
    finally:
        client.pause(DAG_ID)
        client.close()

    assert run["state"] == "success", log[-3000:] + compacted[-3000:]
    assert '"through_ms": ' in compacted, "the compaction's task log says how far the master is compacted"
    assert '"records_cleaned": true' in log, "the task's log in the UI says what it did"
    assert not old_run.exists(), "an older task's log and its emptied folder are gone"
    assert (new_run / "attempt=1.log").read_text() == "a task's log\n"
    assert _audit_rows(settings, old_event) == 0
    assert _audit_rows(settings, new_event) == 1
    with _database(settings) as db:
        assert db.execute("SELECT count(*) FROM dag_run WHERE dag_id = ?", (settings.airflow.dag_id,)).fetchone() == (
            batch_runs
        ), "the batch DAG's recent runs stay"
