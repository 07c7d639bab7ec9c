"""The API app in a TestClient whose serving layer is a tripwire (a query that reaches it fails), and
the one shape every API error has (issue 15). No service is needed; the tripwire is no stand-in for a
store."""

from __future__ import annotations

import re
from collections.abc import Iterator

from fastapi.testclient import TestClient

from api.app import create_app
from api.worker_sync import WorkerSync
from definitions.settings import Settings
from serving_layer.service import ServingLayer

# A TestClient's base URL: a host the API answers to (ApiSettings.host_names; "testserver" is not).
LOCAL_URL = "http://127.0.0.1"


class Tripwire(ServingLayer):
    """The real serving layer (its declared views) whose queries must not be reached; `failure`
    is what a reached query raises."""

    failure: Exception = AssertionError("the serving layer was reached")

    def pointer(self):
        raise self.failure

    def series(self, *args, **kwargs):
        raise self.failure

    def top(self, *args, **kwargs):
        raise self.failure


def make_client(settings: Settings, sync: WorkerSync | None = None) -> Iterator[TestClient]:
    """`sync`: the app is one of several worker processes (api/worker_sync.py)."""
    app = create_app(settings, sync)
    with TestClient(app, base_url=LOCAL_URL, raise_server_exceptions=False) as client:
        app.state.serving.close()
        app.state.serving = Tripwire(settings)
        yield client


def token(settings) -> str:
    return settings.api.token.get_secret_value()


def assert_error_shape(resp, settings, status: int) -> dict:
    """One shape for every error: {"detail": text, optional "errors", "component"}; nothing internal."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    from api.errors import ErrorBody

    body = resp.json()
    ErrorBody.model_validate(body)
    assert isinstance(body["detail"], str) and body["detail"], body
    assert set(body) <= {"detail", "errors", "component"}, body
    text = resp.text
    for leak in ("Traceback", "Exception", "Error:", ".java", "org.apache", settings.api.host, "localhost"):
        assert leak not in text, (leak, text)
    ports = {
        settings.hbase.thrift_port,
        settings.cassandra.port,
        settings.kafka.port,
        settings.hdfs.port,
        settings.hdfs.http_port,
        settings.api.port,
    }
    assert not any(re.search(rf"\b{p}\b", text) for p in ports), text
    return body
