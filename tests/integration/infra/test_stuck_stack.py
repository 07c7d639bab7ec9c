"""On the real stack: a streaming job that finishes no micro-batch within stack.stuck_after_s is
shown stuck by `lambdactl status` and /health, in words, and progressing ones are not. The jobs are
not hung here: the threshold is made shorter than the time since their last micro-batch."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from infra.stack import Stack
from tests.support.polling import wait_for
from tests.support.tripwire_api import LOCAL_URL


def with_threshold(settings, seconds: float):
    return settings.model_copy(update={"stack": settings.stack.model_copy(update={"stuck_after_s": seconds})})


def rows(settings) -> dict:
    return {row.name: row for row in Stack(settings).status(probe=True)}


@pytest.mark.parametrize("job", ["speed-layer", "archiver"])
def test_status_calls_a_job_stuck_only_past_the_threshold(settings, stack, job):
    assert rows(settings)[job].healthy, "progressing with the default threshold"
    row = wait_for(
        lambda: (r := rows(with_threshold(settings, 0.05))[job]) and not r.healthy and r,
        f"{job} to be silent for more than 0.05 s",
        timeout_s=30,
        interval_s=0.05,
    )
    assert row.running and row.detail.startswith("stuck: query "), row.detail
    assert "has finished no micro-batch for" in row.detail and "stack.stuck_after_s=0" in row.detail


def test_health_shows_the_stuck_state_and_why(settings, stack):
    app = create_app(with_threshold(settings, 0.05))
    with TestClient(app, base_url=LOCAL_URL) as client:

        def stuck():
            body = client.get("/health").json()
            return body if body["components"]["speed-layer"]["state"] == "stuck" else None

        body = wait_for(stuck, "the speed layer to be silent for more than 0.05 s", timeout_s=30, interval_s=0.05)
    assert body["status"] == "degraded"
    assert body["components"]["speed-layer"]["detail"].startswith("stuck: query ")
