"""A new install's DAG runs on its schedule: Airflow creates DAGs paused by default, and nothing but
the platform's API (and the demo) unpaused this one, so `lambdactl up` alone never ran a batch: the
cutoff stayed put, absorbed realtime rows were never cleaned, and answers went incomplete after the
realtime TTL. The tests keep it paused at creation (the Makefile), out of their way."""

from __future__ import annotations

from definitions.service_settings import AirflowSettings
from infra.airflow import environment


def test_a_new_dag_is_active_unless_asked_otherwise(settings):
    default = settings.model_copy(update={"airflow": AirflowSettings()})
    assert environment(default)["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "False"
    paused = settings.model_copy(update={"airflow": AirflowSettings(paused_at_creation=True)})
    assert environment(paused)["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "True"


def test_the_tests_keep_it_paused_at_creation():
    from definitions.section import REPO_ROOT

    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "export LAMBDA_AIRFLOW__PAUSED_AT_CREATION ?= true" in makefile


def test_airflow_takes_none_of_the_shell_s_own_airflow_settings(settings, monkeypatch):
    """Airflow read every `AIRFLOW__*` variable left in the shell that ran `lambdactl up`: one such as
    AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS=True turned its login off, another exposed its
    configuration, silently. It runs with the platform's settings alone."""
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "True")
    monkeypatch.setenv("AIRFLOW__API__EXPOSE_CONFIG", "True")
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "SequentialExecutor")
    env = environment(settings)
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] == "False"
    assert "AIRFLOW__API__EXPOSE_CONFIG" not in env
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["PATH"].endswith(__import__("os").environ["PATH"]), "the rest of the environment is kept"
