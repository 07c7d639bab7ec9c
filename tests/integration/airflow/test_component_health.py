"""Airflow's DAG processor is reported alive through a busy spell and dead once it hangs. Airflow 3.1
stores each heartbeat one heartbeat late and calls its DAG processor unhealthy past 10.5 s: the
stack's status (and `up`'s "nothing changed") flapped whenever the machine was busy for a moment."""

from __future__ import annotations

import os
import signal
import time

import pytest

from stores.airflow import AirflowClient, _monitor, component_health
from tests.support.polling import wait_for

BUSY_S = 10  # a stall longer than Airflow 3.1's own threshold allows, well inside heartbeat_stale_s


def _airflow_says(settings) -> str:
    client = AirflowClient(settings, timeout_s=10)
    try:
        return str(_monitor(client).get("dag_processor", {}).get("status"))
    finally:
        client.close()


def _alive(settings) -> bool:
    try:
        component_health(settings, "dag-processor")
    except RuntimeError:
        return False
    return True


def test_a_stalled_dag_processor_stays_healthy_and_a_hung_one_is_reported(settings, stack):
    assert settings.airflow.heartbeat_stale_s >= 2 * BUSY_S
    wait_for(lambda: _alive(settings), "the DAG processor's heartbeat", timeout_s=120)
    proc = stack.supervisor.process("airflow-dag-processor")
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        airflow_said, ours = set(), []
        until = time.monotonic() + BUSY_S
        while time.monotonic() < until:
            airflow_said.add(_airflow_says(settings))
            ours.append(component_health(settings, "dag-processor"))  # raises if judged dead
            time.sleep(0.5)
        if "unhealthy" not in airflow_said:
            pytest.fail(f"Airflow never called the stalled DAG processor unhealthy ({airflow_said}): nothing shown")
        assert len(ours) >= BUSY_S, ours
        wait_for(lambda: not _alive(settings), "the hung DAG processor to be reported", timeout_s=60)
        with pytest.raises(RuntimeError, match="older than airflow.heartbeat_stale_s"):
            component_health(settings, "dag-processor")
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    wait_for(lambda: _alive(settings), "the resumed DAG processor's heartbeat", timeout_s=60)
