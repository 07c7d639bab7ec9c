"""Whether one of Airflow's components is alive is judged from the age of its last heartbeat, against
`airflow.heartbeat_stale_s`, not from the status Airflow 3.1 gives it: Airflow stores each heartbeat
one heartbeat late (ages of 5-10 s on an idle machine) and calls its DAG processor unhealthy past
10.5 s, so the status flapped whenever the machine was busy for half a second."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from definitions.settings import Settings
from stores.airflow import heartbeat_verdict

NOW = datetime(2026, 12, 4, 4, 0, 0, tzinfo=UTC)


def _entry(age_s: float | None, status: str = "unhealthy") -> dict:
    beat = None if age_s is None else (NOW - timedelta(seconds=age_s)).isoformat()
    return {"status": status, "latest_dag_processor_heartbeat": beat}


def test_a_heartbeat_airflow_calls_unhealthy_but_younger_than_the_threshold_is_alive():
    alive, detail = heartbeat_verdict(_entry(12.0), NOW, stale_s=30)
    assert alive, detail
    assert "12 s ago" in detail


def test_a_heartbeat_older_than_the_threshold_is_not_alive_whatever_airflow_says():
    alive, detail = heartbeat_verdict(_entry(31.0, status="healthy"), NOW, stale_s=30)
    assert not alive
    assert "31 s ago" in detail and "30 s" in detail


def test_no_heartbeat_reported_is_not_alive():
    alive, detail = heartbeat_verdict({}, NOW, stale_s=30)
    assert not alive
    assert "no heartbeat" in detail


@pytest.mark.parametrize("beat", ["yesterday", "", 17])
def test_a_heartbeat_that_is_no_time_is_not_alive_and_named(beat):
    alive, detail = heartbeat_verdict({"status": "healthy", "latest_scheduler_heartbeat": beat}, NOW, stale_s=30)
    assert not alive
    assert repr(beat)[:20] in detail


def test_a_heartbeat_far_in_the_future_is_not_alive_the_clocks_disagree():
    beat = (NOW + timedelta(seconds=31)).isoformat()
    alive, detail = heartbeat_verdict({"latest_scheduler_heartbeat": beat}, NOW, stale_s=30)
    assert not alive
    assert "clocks" in detail
    near = (NOW + timedelta(seconds=2)).isoformat()
    assert heartbeat_verdict({"latest_scheduler_heartbeat": near}, NOW, stale_s=30)[0]


def test_a_heartbeat_without_a_zone_is_read_as_utc():
    beat = (NOW - timedelta(seconds=3)).replace(tzinfo=None).isoformat()
    alive, detail = heartbeat_verdict({"latest_scheduler_heartbeat": beat}, NOW, stale_s=30)
    assert alive and "3 s ago" in detail, detail


def test_the_threshold_is_a_setting_with_room_for_airflows_late_writes():
    assert Settings().airflow.heartbeat_stale_s == 30
    with pytest.raises(ValueError, match="heartbeat_stale_s"):
        Settings(airflow={"heartbeat_stale_s": 10})


def test_airflow_s_scheduler_threshold_is_the_setting(settings):
    from infra.airflow import environment

    tuned = settings.model_copy(update={"airflow": settings.airflow.model_copy(update={"heartbeat_stale_s": 45})})
    assert environment(tuned)["AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD"] == "45"
