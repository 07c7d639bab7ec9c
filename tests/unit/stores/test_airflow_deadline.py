"""An Airflow client with a deadline (the API's recompute route) gives up when it has passed, however
many calls remain: a slow Airflow holds the route's lock for the budget, not ten calls of its timeout.
A real local HTTP server that answers slowly stands in for a slow Airflow API server."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from definitions.settings import Settings
from stores.airflow import AirflowClient, AirflowTimeout

DELAY_S = 0.4


class Slow(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        time.sleep(DELAY_S)
        body = json.dumps({"access_token": "t", "dag_runs": [], "is_paused": False}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def slow_airflow():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield Settings(airflow={"host": "127.0.0.1", "port": server.server_address[1]})
    server.shutdown()
    server.server_close()


def test_calls_after_the_deadline_are_not_made_and_the_error_names_the_budget(slow_airflow):
    client = AirflowClient(slow_airflow, timeout_s=15, deadline_s=1.0)
    began = time.monotonic()
    with pytest.raises(AirflowTimeout, match=r"1 s"):
        for _ in range(10):  # each call (and the token's) takes DELAY_S
            client.dag("lambda_batch_recompute")
    took = time.monotonic() - began
    client.close()
    assert took < 1.0 + DELAY_S + 0.5, f"gave up after {took:.1f} s, not at its 1 s deadline"


def test_a_call_that_would_outlast_the_deadline_is_cut_at_it(slow_airflow):
    client = AirflowClient(slow_airflow, timeout_s=15, deadline_s=0.15)
    began = time.monotonic()
    with pytest.raises(AirflowTimeout):
        client.dag("lambda_batch_recompute")
    took = time.monotonic() - began
    client.close()
    assert took < DELAY_S, f"a {DELAY_S} s answer was waited for ({took:.2f} s) past a 0.15 s deadline"


def test_without_a_deadline_every_call_is_made(slow_airflow):
    client = AirflowClient(slow_airflow, timeout_s=15)
    for _ in range(3):
        assert client.dag("lambda_batch_recompute") == {"access_token": "t", "dag_runs": [], "is_paused": False}
    client.close()


def test_the_recompute_route_answers_a_503_at_its_budget_while_airflow_is_slow(slow_airflow, monkeypatch):
    from api.routes import admin
    from tests.support.tripwire_api import assert_error_shape, make_client, token

    monkeypatch.setattr(admin, "TRIGGER_BUDGET_S", 1.0)
    for client in make_client(slow_airflow):
        began = time.monotonic()
        resp = client.post("/api/v1/admin/recompute", headers={"Authorization": f"Bearer {token(slow_airflow)}"})
        took = time.monotonic() - began
        body = assert_error_shape(resp, slow_airflow, 503)
        assert "did not answer within 1 s" in body["detail"], body
        assert took < 1.0 + DELAY_S + 0.5, f"answered after {took:.1f} s"
