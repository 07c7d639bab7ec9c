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
