"""What the API answers beyond its routes: no redirect built from the request's Host header, no
answer to a Host it does not serve, and no page loading a script from a CDN outside development (no service: the app in a TestClient)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr, ValidationError

from api.app import create_app
from definitions.service_settings import ApiSettings
from tests.support.tripwire_api import LOCAL_URL, make_client


def test_a_trailing_slash_is_not_redirected_to_the_host_the_client_named(settings):
    """Starlette answered 307 with Location: http://<the request's Host>/…: an open redirect, and a
    poisoned cache entry behind a proxy that forwards Host."""
    for client in make_client(
        settings.model_copy(update={"api": settings.api.model_copy(update={"allowed_hosts": ["*"]})})
    ):
        for path in ("/api/v1/views/", "/api/v1/reports/", "/openapi.json/"):
            answer = client.get(path, headers={"Host": "evil.example"}, follow_redirects=False)
            assert answer.status_code == 404 and "location" not in answer.headers, path
        assert client.get("/openapi.json").status_code == 200


def test_a_host_header_naming_a_host_the_api_does_not_answer_to_is_refused(settings):
    """A web page whose name its owner pointed at 127.0.0.1 (DNS rebinding) is the API's origin to
    the browser: every tokenless answer (the views, status, reports) was its to read."""
    for client in make_client(settings):
        for host in ("evil.example:8000", "evil.example", "127.0.0.1.evil.example", "[::2]:8000", "localhost.:8000"):
            answer = client.get("/api/v1/views", headers={"Host": host})
            assert answer.status_code == 400, host
            assert answer.json() == {
                "detail": "the Host header names a host this API does not answer to (api.allowed_hosts)"
            }
            assert answer.headers["x-content-type-options"] == "nosniff"
        assert client.get("/", headers={"Host": "evil.example"}).status_code == 400, "the dashboard too"
        for host in ("127.0.0.1:8000", "localhost", "LOCALHOST:8000", "[::1]:8000", "127.0.0.1"):
            assert client.get("/openapi.json", headers={"Host": host}).status_code == 200, host


@pytest.mark.parametrize("version, status", [("1.1", 400), ("1.0", 200)])
def test_an_http_1_1_request_without_a_host_header_is_refused(settings, version, status):
    """With no Host header at all, no host was checked: an HTTP/1.1 request (which must name one)
    was answered. HTTP/1.0 clients may leave it out."""
    import asyncio

    app = create_app(settings)
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": version,
        "method": "GET",
        "scheme": "http",
        "path": "/health",
        "raw_path": b"/health",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"accept", b"application/json")],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    with TestClient(app, base_url=LOCAL_URL):
        asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == status, sent
    if status == 400:
        assert b"a Host header is required" in sent[1]["body"]


def test_the_hosts_the_api_answers_to_follow_its_address_and_public_url():
    loopback = {"localhost", "127.0.0.1", "::1"}
    assert ApiSettings().host_names() == loopback
    assert ApiSettings(host="10.1.2.3", public_url="https://Lambda.example.org/x").host_names() == {
        *loopback,
        "10.1.2.3",
        "lambda.example.org",
    }
    assert ApiSettings(host="0.0.0.0").host_names() is None, "every address: any name, with a warning"
    assert ApiSettings(host="0.0.0.0", allowed_hosts=["api", "Lambda.example.org"]).host_names() == {
        *loopback,
        "0.0.0.0",  # the platform's own clients ask http://<api.host>:<api.port>
        "api",
        "lambda.example.org",
    }
    assert ApiSettings(allowed_hosts=["*"]).host_names() is None
    assert "::1" in ApiSettings(allowed_hosts=["[::1]", "fe80::1"]).host_names()
    for bad in ("evil example", "a/b", "", "x" * 254, "api:8000"):
        with pytest.raises(ValidationError, match="allowed_hosts"):
            ApiSettings(allowed_hosts=[bad])


def test_the_interactive_docs_are_served_in_development_only(settings):
    """They load Swagger UI's script from a CDN, on the API's origin, where users paste their token."""
    for client in make_client(settings.model_copy(update={"environment": "development"})):
        assert client.get("/docs").status_code == 200
    production = settings.model_copy(
        update={"environment": "production", "api": ApiSettings(token=SecretStr("t0k3n-long-enough-42"))}
    )
    app = create_app(production)
    paths = {getattr(r, "path", "") for r in app.router.routes}
    assert "/docs" not in paths and "/redoc" not in paths and "/openapi.json" in paths


def test_head_is_answered_as_get_without_a_body(settings):
    """Monitors ask HEAD; every route answered 405."""
    for client in make_client(settings):
        got, head = client.get("/openapi.json"), client.head("/openapi.json")
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-type"] == got.headers["content-type"]
        assert head.headers["x-content-type-options"] == "nosniff"
        assert client.head("/").status_code == 200 and client.head("/").content == b""
        assert client.head("/api/v1/admin/recompute").status_code == 405, "a POST route takes no HEAD"


def test_an_unexpected_failure_carries_the_headers_every_answer_has(settings):
    """Starlette answers a 500 from its outermost middleware, outside the app's own: the answer went
    out without `nosniff`, and on the dashboard's paths without its policy."""
    app = create_app(settings)

    def broken() -> None:
        raise RuntimeError("at /internal/path on 10.0.0.7")

    app.add_api_route("/api/v1/broken", broken)
    app.add_api_route("/static/broken", broken)
    app.router.routes.insert(0, app.router.routes.pop())  # before the static files' mount
    with TestClient(app, base_url=LOCAL_URL, raise_server_exceptions=False) as client:
        for path in ("/api/v1/broken", "/static/broken"):
            answer = client.get(path)
            assert answer.status_code == 500, path
            assert answer.headers["x-content-type-options"] == "nosniff", path
            assert "10.0.0.7" not in answer.text and "/internal" not in answer.text
        assert "content-security-policy" in client.get("/static/broken").headers
        assert 'status="500"' in client.get("/metrics").text


def test_a_range_of_many_parts_gets_the_whole_file_and_one_part_its_bytes(client):
    """Starlette merges a multi-part Range in time that grows with the square of its parts: 4,846
    one-byte parts of the dashboard's script cost 0.7 s of CPU per unauthenticated request."""
    whole = client.get("/static/dashboard.js")
    parts = ",".join(f"{i}-{i}" for i in range(0, 9_000, 2))
    many = client.get("/static/dashboard.js", headers={"Range": f"bytes={parts}"})
    assert many.status_code == 200 and many.content == whole.content
    one = client.get("/static/dashboard.js", headers={"Range": "bytes=0-9"})
    assert one.status_code == 206 and one.content == whole.content[:10]


def test_a_path_with_a_nul_byte_is_refused_as_not_found(client, caplog):
    """`/static/%00` made the static files' lookup raise (os.path.realpath: embedded null byte): a
    500 and a traceback logged at ERROR for every such unauthenticated request."""
    import logging

    with caplog.at_level(logging.ERROR):
        for path in ("/static/%00", "/static/a%00b.js", "/api/v1/reports/%00", "/%00"):
            answer = client.get(path)
            assert answer.status_code == 404, path
            assert answer.json() == {"detail": "no such path: it holds a NUL byte"}, path
            assert answer.headers["x-content-type-options"] == "nosniff"
    assert not caplog.records, "nothing to log: a refusal, not a failure"


def test_a_failure_is_logged_with_the_path_asked_its_control_characters_escaped(settings, caplog):
    """The logged path was rebuilt from the Host header (`Host: x/forged?` logged `/forged`), and an
    escape sequence in the path reached the log as it came."""
    import logging

    app = create_app(settings.model_copy(update={"api": settings.api.model_copy(update={"allowed_hosts": ["*"]})}))

    def broken() -> None:
        raise RuntimeError("broken")

    app.add_api_route("/api/v1/broken{rest:path}", broken)
    with TestClient(app, base_url=LOCAL_URL, raise_server_exceptions=False) as client, caplog.at_level(logging.ERROR):
        assert client.get("/api/v1/broken%1B[31mred", headers={"Host": "x/forged?"}).status_code == 500
    logged = [r.getMessage() for r in caplog.records if "failed unexpectedly" in r.getMessage()]
    assert logged == ["GET /api/v1/broken\\x1b[31mred failed unexpectedly"], logged


def test_the_latency_metric_labels_a_method_it_does_not_serve_as_other(client):
    """Labelled with the method as sent: each of the ~46 methods the HTTP parser accepts added series
    per route and status to the unauthenticated /metrics page."""
    for method in ("PROPFIND", "MKCOL", "LINK"):
        client.request(method, "/api/v1/views")
    text = client.get("/metrics").text
    assert 'method="PROPFIND"' not in text and 'method="MKCOL"' not in text
    assert 'method="other"' in text


def test_an_expectation_other_than_100_continue_is_refused_with_417(settings):
    """`Expect: foo` was passed over and the request answered (RFC 9110 §10.1.1: 417)."""
    for client in make_client(settings):
        for value in ("foo", "100-continue, foo", "200-ok"):
            answer = client.get("/health", headers={"Expect": value})
            assert answer.status_code == 417, value
            assert answer.json() == {
                "detail": "the Expect header asks for what this API does not do: only 100-continue"
            }
        for value in ("100-continue", "100-Continue "):
            assert client.get("/health", headers={"Expect": value}).status_code == 200, value
