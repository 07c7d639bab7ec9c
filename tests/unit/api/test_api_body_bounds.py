"""The API checks the token before it reads a request body, bounds the body, and answers a bad one
with the one error shape (issue 15): POST /api/v1/events and /api/v1/admin/recompute. No service is
needed: every request here is answered before the serving layer (a tripwire) or Airflow is reached."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.support.tripwire_api import assert_error_shape, token

BIG = 50 * 1024 * 1024
CHUNK = 64 * 1024


# --- POST /api/v1/events: the token first, then a bounded body -----------------------------------


def post_raw(
    client: TestClient, headers: dict[str, str], chunks: Iterator[bytes], path: str = "/api/v1/events"
) -> tuple[int, dict, dict, int]:
    """POST at the ASGI level: the body comes chunk by chunk, and what the app pulled of it is
    counted. Returns (status, headers, body, bytes read)."""
    read = 0
    out: dict = {"body": b""}

    async def receive():
        nonlocal read
        chunk = next(chunks, None)
        if chunk is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        read += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(message):
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
            out["headers"] = {k.decode().lower(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "client": ("127.0.0.2", 5000),
        "server": ("testserver", 80),
        # as an HTTP/1.1 client sends it: without a Host header the request is refused first
        "headers": [(b"host", b"127.0.0.1"), *((k.lower().encode(), v.encode("latin-1")) for k, v in headers.items())],
    }

    async def run():
        await client.app(scope, receive, send)

    client.portal.call(run)
    return out["status"], out["headers"], json.loads(out["body"]), read


def big_body() -> Iterator[bytes]:
    yield b"["
    for _ in range(BIG // CHUNK):
        yield b" " * CHUNK


class Response:
    def __init__(self, status, headers, body):
        self.status_code, self.headers, self._body = status, headers, body
        self.text = json.dumps(body)

    def json(self):
        return self._body


@pytest.mark.parametrize("path", ["/api/v1/events", "/api/v1/admin/recompute"])
def test_without_a_token_a_huge_body_is_refused_unread(client, settings, path):
    for headers in (
        {"content-type": "application/json", "content-length": str(BIG + 1)},
        {"content-type": "application/json", "authorization": "Bearer wrong", "content-length": str(BIG + 1)},
        {"content-type": "application/json"},
    ):
        status, resp_headers, body, read = post_raw(client, headers, big_body(), path)
        assert_error_shape(Response(status, resp_headers, body), settings, 401)
        assert resp_headers.get("www-authenticate") == "Bearer"
        assert read == 0, f"{read} bytes of the body read before the token was checked"


@pytest.mark.parametrize("path", ["/api/v1/events", "/api/v1/admin/recompute"])
def test_a_declared_length_over_the_cap_is_a_413_unread(client, settings, path):
    headers = {
        "content-type": "application/json",
        "authorization": f"Bearer {token(settings)}",
        "content-length": str(settings.api.max_body_bytes + 1),
    }
    status, resp_headers, body, read = post_raw(client, headers, big_body(), path)
    body = assert_error_shape(Response(status, resp_headers, body), settings, 413)
    assert str(settings.api.max_body_bytes) in body["detail"]
    assert read == 0


@pytest.mark.parametrize("declared", ["\u00b2", "\u00b9\u00b2", "12a", "-1", " 5"])
def test_a_declared_length_that_is_no_ascii_number_is_a_400_unread(client, settings, declared):
    """Byte 0xB2 ("²") is a digit to str.isdigit() but not to int(): a 500 behind any HTTP parser
    that lets it through (uvicorn's llhttp refuses it first)."""
    headers = {"content-type": "application/json", "authorization": f"Bearer {token(settings)}"}
    status, resp_headers, body, read = post_raw(client, {**headers, "content-length": declared}, big_body())
    body = assert_error_shape(Response(status, resp_headers, body), settings, 400)
    assert body["detail"] == "Content-Length is not a number of bytes" and read == 0


def test_a_streamed_body_over_the_cap_is_a_413_read_no_further_than_the_cap(client, settings):
    headers = {
        "content-type": "application/json",
        "authorization": f"Bearer {token(settings)}",
        "transfer-encoding": "chunked",
    }
    status, resp_headers, body, read = post_raw(client, headers, big_body())
    assert_error_shape(Response(status, resp_headers, body), settings, 413)
    assert read <= settings.api.max_body_bytes + CHUNK


@pytest.mark.parametrize(
    "body, status, words",
    [
        (b"[" * 100_000 + b"]" * 100_000, 400, "nest"),
        (b'[{"a": ' * 5_000 + b"1" + b"}]" * 5_000, 400, "nest"),
        (b'[{"event_id": "x"', 400, "JSON"),
        (b"\xff\xfe[]", 400, "JSON"),
        (b"", 422, "no events"),
        (b"[]", 422, "no events"),
        (b'{"event_id": "x"}', 422, "array"),
        (b"[" + b"1," * 1_000 + b"1]", 422, "too many events"),
    ],
)
def test_a_malformed_body_is_a_4xx_with_a_clear_message(client, settings, body, status, words):
    resp = client.post(
        "/api/v1/events",
        content=body,
        headers={"Authorization": f"Bearer {token(settings)}", "Content-Type": "application/json"},
    )
    got = assert_error_shape(resp, settings, status)
    assert words in got["detail"], got


@pytest.mark.parametrize(
    "headers, words",
    [
        # gzip was read as JSON text: "malformed JSON: invalid UTF-8 at byte 1"
        ({"Content-Encoding": "gzip"}, "Content-Encoding gzip"),
        ({"Content-Type": "text/plain"}, "Content-Type text/plain"),
        ({"Content-Type": "application/x-www-form-urlencoded"}, "Content-Type application/x-www-form-urlencoded"),
        ({"Content-Type": "application/json; charset=latin-1"}, "charset latin-1"),
    ],
)
def test_a_body_in_another_form_than_json_text_is_a_415_naming_it(client, settings, headers, words):
    import gzip

    body = json.dumps([{"event_id": "e"}]).encode()
    if headers.get("Content-Encoding") == "gzip":
        body = gzip.compress(body)
    resp = client.post(
        "/api/v1/events", content=body, headers={"Authorization": f"Bearer {token(settings)}", **headers}
    )
    got = assert_error_shape(resp, settings, 415)
    assert words in got["detail"] and "application/json" in got["detail"], got


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON;charset=UTF-8",
        "application/cloudevents-batch+json",
    ],
)
def test_json_bodies_are_read_with_or_without_their_type(client, settings, content_type):
    headers = {"Authorization": f"Bearer {token(settings)}"}
    if content_type:
        headers["Content-Type"] = content_type
    resp = client.post("/api/v1/events", content=b"[]", headers=headers)
    assert "no events" in assert_error_shape(resp, settings, 422)["detail"]


def test_a_bad_recompute_request_is_a_422_before_airflow_is_asked(client, settings):
    resp = client.post(
        "/api/v1/admin/recompute",
        json={"mode": "everything", "extra": 1},
        headers={"Authorization": f"Bearer {token(settings)}"},
    )
    body = assert_error_shape(resp, settings, 422)
    assert "mode" in body["detail"] and {tuple(e["loc"]) for e in body["errors"]} >= {
        ("body", "mode"),
        ("body", "extra"),
    }


def test_a_recompute_of_an_undeclared_view_is_a_422_naming_it_before_airflow_is_asked(client, settings):
    resp = client.post(
        "/api/v1/admin/recompute",
        json={"views": ["page_views", "no_such_view"]},
        headers={"Authorization": f"Bearer {token(settings)}"},
    )
    body = assert_error_shape(resp, settings, 422)
    assert "no_such_view" in body["detail"] and "page_views" in body["detail"].split("declared views:")[1]


@pytest.mark.parametrize(
    ("cutoff", "words"),
    [
        ("yesterday", "not an ISO 8601 time"),
        ("2026-13-01T00:00:00Z", "not an ISO 8601 time"),
        ("1969-12-31T23:00:00Z", "before 1970"),
        ("2026-11-27T02:00:00+99:00", "not an ISO 8601 time"),
    ],
)
def test_a_recompute_with_a_malformed_cutoff_is_a_422_naming_it_before_airflow_is_asked(
    client, settings, cutoff, words
):
    resp = client.post(
        "/api/v1/admin/recompute",
        json={"cutoff": cutoff},
        headers={"Authorization": f"Bearer {token(settings)}"},
    )
    body = assert_error_shape(resp, settings, 422)
    assert "cutoff" in body["detail"] and words in body["detail"] and "Value error" not in body["detail"], body


def test_invalid_events_get_per_record_errors_in_the_same_shape(client, settings):
    good = {
        "event_id": "e-1",
        "event_time": "2026-11-21T10:00:00Z",
        "user_id": "u1",
        "url": "/x",
        "event_type": "page_view",
    }
    events = [
        good,
        {**good, "event_type": "hover"},
        {**good, "url": 5},
        "not an object",
        {**good, "url": "/" + "x" * (settings.events.max_record_bytes + 10)},
    ]
    resp = client.post("/api/v1/events", json=events, headers={"Authorization": f"Bearer {token(settings)}"})
    body = assert_error_shape(resp, settings, 422)
    assert "4 of 5 events are invalid" in body["detail"] and "none was accepted" in body["detail"]
    assert [e["index"] for e in body["errors"]] == [1, 2, 3, 4]
    assert body["errors"][0]["event_id"] == "e-1" and body["errors"][0]["error"].startswith("bad value: event_type")


def test_airflow_refusing_a_run_is_a_409_for_a_view_it_does_not_offer_yet_else_a_422_in_its_words():
    import httpx

    from api.routes.admin import refusal
    from stores.airflow import refusal_reason

    # Airflow 3's answers to a run whose params its DAG refuses (as read from its REST API).
    views = httpx.Response(
        400,
        json={
            "detail": "Invalid input for param views: 'new_view' is not one of ['page_views']\n\n"
            "Failed validating 'enum' in schema['items']:\n    {'type': 'string'}"
        },
    )
    mode = httpx.Response(
        400, json={"detail": "Invalid input for param mode: 'x' is not one of ['next_cutoff']\n\n..."}
    )
    body = httpx.Response(
        422, json={"detail": [{"loc": ["body", "conf"], "msg": "Input should be a valid dictionary"}]}
    )
    assert refusal_reason(views).endswith("is not one of ['page_views']")
    status, message = refusal("lambda_batch_recompute", refusal_reason(views))
    assert status == 409 and "try again shortly" in message
    status, message = refusal("lambda_batch_recompute", refusal_reason(mode))
    assert status == 422 and message.endswith("Invalid input for param mode: 'x' is not one of ['next_cutoff']")
    status, message = refusal("lambda_batch_recompute", refusal_reason(body))
    assert status == 422 and "Input should be a valid dictionary" in message
    assert refusal_reason(httpx.Response(400, text="<html>bad</html>")) == "<html>bad</html>"


@pytest.mark.parametrize("body", [{"detail": None}, [1, 2], "text", {"detail": {"msg": "x"}}, {"other": 1}])
def test_any_airflow_refusal_body_gives_a_reason_and_never_raises(body):
    import httpx

    from stores.airflow import refusal_reason

    assert isinstance(refusal_reason(httpx.Response(400, json=body)), str)


def test_a_token_that_is_empty_at_run_time_lets_no_request_without_credentials_through(settings):
    """Settings refuse an empty token (definitions.settings); should one reach the app anyway (a
    copy made without validation), a request without credentials is still 401."""
    from pydantic import SecretStr

    from tests.support.tripwire_api import make_client

    empty = settings.model_copy(update={"api": settings.api.model_copy(update={"token": SecretStr("")})})
    for client in make_client(empty):
        for headers in ({}, {"authorization": "Bearer "}):
            resp = client.post("/api/v1/admin/views/refresh", headers=headers)
            assert resp.status_code == 401, resp.text


def test_an_event_giving_a_field_twice_is_a_422_naming_it(client, settings):
    """Accepted, the last value counted: another reader of the topic may take the first."""
    good = '{"event_id":"e-1","event_time":"2026-11-21T10:00:00Z","user_id":"u1","url":"/x","event_type":"click"}'
    twice = good[:-1] + ',"event_type":"purchase"}'
    resp = client.post(
        "/api/v1/events",
        content=f"[{good},{twice}]",
        headers={"Authorization": f"Bearer {token(settings)}", "Content-Type": "application/json"},
    )
    body = assert_error_shape(resp, settings, 422)
    assert [(e["index"], e["error"]) for e in body["errors"]] == [(1, "duplicate field: event_type")]


def test_every_copy_of_a_body_header_is_read_and_an_empty_one_is_none():
    from starlette.datastructures import Headers

    from api.errors import ApiError
    from api.routes.events import json_text

    def refusal(*pairs: tuple[str, str]) -> str | None:
        try:
            json_text(Headers(raw=[(k.encode(), v.encode()) for k, v in pairs]))
        except ApiError as exc:
            return exc.detail
        return None

    assert "Content-Encoding gzip" in refusal(("content-encoding", "identity"), ("content-encoding", "gzip"))
    assert "Content-Encoding gzip" in refusal(("content-encoding", "identity, gzip"))
    assert "Content-Type text/plain" in refusal(("content-type", "application/json"), ("content-type", "text/plain"))
    assert refusal(("content-type", ""), ("content-encoding", "")) is None
