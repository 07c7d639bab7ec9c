"""The API bounds work before doing it, and its errors have one shape (issue 15). No service is
needed: every request here is answered before the serving layer is reached. The serving layer is a
tripwire that fails the request if a query gets to it; it is no stand-in for a store."""

from __future__ import annotations

import json
import re
import time
import tracemalloc
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from definitions.settings import Settings
from serving_layer.service import ServingLayer, StoreUnavailable

VIEWS = "/api/v1/views"
BIG = 50 * 1024 * 1024
CHUNK = 64 * 1024


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


def make_client(settings: Settings) -> Iterator[TestClient]:
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        app.state.serving.close()
        app.state.serving = Tripwire(settings)
        yield client


@pytest.fixture(scope="module")
def client(settings) -> Iterator[TestClient]:
    yield from make_client(settings)


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


# --- the window is bounded arithmetically, before anything is allocated -------------------------

HUGE_RANGES = [
    # a century of minutes: 52 million buckets (it took 2 GiB and seconds to refuse)
    ("page_views?url=/", "minute", "1926-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "start"),
    # within the window, but far too many buckets, at every granularity and every view
    ("page_views?url=/", "minute", "2000-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "range too large"),
    ("unique_visitors?url=/", "hour", "2000-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "range too large"),
    ("top_pages?limit=5", "day", "2000-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "range too large"),
    (
        "page_views_by_country_device?country=DE&device=mobile",
        "hour",
        "2000-01-01T00:00:00Z",
        "2026-01-01T00:00:00Z",
        "range too large",
    ),
    # the whole calendar Python knows (it answered 500 MemoryError)
    ("page_views?url=/", "minute", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "start"),
    ("top_pages?limit=5", "minute", "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "start"),
    # before 1970 (it answered 500 struct.error)
    ("page_views?url=/", "hour", "1969-12-31T00:00:00Z", "1970-01-01T01:00:00Z", "start"),
    # far in the future
    ("page_views?url=/", "day", "2026-01-01T00:00:00Z", "9999-01-01T00:00:00Z", "end"),
]


@pytest.mark.parametrize("path, granularity, start, end, names", HUGE_RANGES)
def test_an_absurd_range_is_a_422_in_milliseconds_without_allocating(
    client, settings, path, granularity, start, end, names
):
    url = f"{VIEWS}/{path}&granularity={granularity}&start={start.replace('+', '%2B')}&end={end.replace('+', '%2B')}"
    client.get(url)  # warm up: first-request costs are not the query's
    tracemalloc.start()
    try:
        started = time.perf_counter()
        resp = client.get(url)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    body = assert_error_shape(resp, settings, 422)
    assert names in body["detail"], body
    assert elapsed < 0.25, f"{elapsed:.3f}s to refuse"
    assert peak < 4 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB allocated to refuse"


@pytest.mark.parametrize(
    "start, end, name",
    [
        ("2026-11-21T10:00:00Z", "2026-11-21T09:00:00Z", "start"),
        ("2026-11-21T10:00:00Z", "2026-11-21T10:00:00Z", "start"),
        ("yesterday", "2026-11-21T10:00:00Z", "start"),
        ("2026-13-01T00:00:00Z", "2026-11-21T10:00:00Z", "start"),
        ("2026-02-30T00:00:00Z", "2026-11-21T10:00:00Z", "start"),
        ("2026-11-21T10:00:00Z", "+12026-11-21T10:00:00Z", "end"),
        ("2026-11-21T10:00:00Z", "2026-11-21T24:00:00Z", "end"),
        ("2026-11-21T10:00:00Z", "2026-11-21T11:00:00+25:00", "end"),
        ("2026-11-21T10:00:00Z", "2026-11-21T11:00:00Z\n", "end"),
    ],
)
def test_bad_times_and_empty_ranges_are_422s_naming_the_parameter(client, settings, start, end, name):
    resp = client.get(f"{VIEWS}/page_views", params={"url": "/", "granularity": "hour", "start": start, "end": end})
    body = assert_error_shape(resp, settings, 422)
    assert name in body["detail"], body


def test_bad_view_parameters_are_422s(client, settings):
    for path, name in (
        ("page_views?url=/&granularity=week", "granularity"),
        ("page_views_by_country_device?country=DE&device=mobile&granularity=minute", "granularity"),
        ("top_pages?limit=0", "limit"),
        ("top_pages?limit=101", "limit"),
        ("page_views_by_country_device?country=DE", "device"),
        ("page_views", "url"),
        ("page_views?url=", "url"),
        ("page_views?url=/&partial=maybe", "partial"),
        # a key no event can hold (the event contract's rules for the field)
        ("page_views_by_country_device?country=de&device=mobile&granularity=day", "country"),
        ("page_views_by_country_device?country=DE&device=phone&granularity=day", "device"),
        (f"page_views?url=/{'x' * settings.events.max_url_chars}", "url"),
    ):
        body = assert_error_shape(client.get(f"{VIEWS}/{path}"), settings, 422)
        assert name in body["detail"], (path, body)
        assert body["errors"] and all("loc" in e and "msg" in e for e in body["errors"]), body


def test_an_unknown_view_or_route_is_a_404_and_a_wrong_method_a_405(client, settings):
    body = assert_error_shape(client.get(f"{VIEWS}/nope?url=/"), settings, 404)
    assert "unknown view 'nope'" in body["detail"] and "page_views" in body["detail"]
    assert_error_shape(client.get("/api/v1/nothing-here"), settings, 404)
    resp = client.delete(f"{VIEWS}/page_views?url=/")
    assert_error_shape(resp, settings, 405)
    assert "GET" in resp.headers["allow"]


# --- a bounded number of queries at once ---------------------------------------------------------


def test_queries_beyond_the_concurrency_limit_get_429_with_retry_after(settings):
    tight = settings.model_copy(
        update={"api": settings.api.model_copy(update={"max_concurrent_queries": 2, "query_queue_s": 0.2})}
    )
    for client in make_client(tight):
        slots = client.app.state.query_slots
        for _ in range(2):
            client.portal.call(slots.acquire)
        try:
            started = time.perf_counter()
            resp = client.get(f"{VIEWS}/page_views", params={"url": "/", "granularity": "hour"})
            waited = time.perf_counter() - started
        finally:
            for _ in range(2):
                client.portal.call(slots.release)
        body = assert_error_shape(resp, tight, 429)
        assert "busy" in body["detail"] and int(resp.headers["retry-after"]) >= 1
        assert 0.2 <= waited < 2, waited
        # a free slot: the query goes on (to the tripwire, which answers the generic 500)
        assert client.get(f"{VIEWS}/page_views", params={"url": "/", "granularity": "hour"}).status_code == 500


# --- store failures and unexpected errors say nothing internal -----------------------------------


def test_a_store_failure_is_a_503_naming_the_component_and_nothing_else(client, settings):
    serving = client.app.state.serving
    java = (
        "org.apache.hadoop.hbase.TableNotFoundException: lambda:page_views_v3\n\tat "
        "org.apache.hadoop.hbase.client.HTable.get(HTable.java:412) via 127.0.0.1:9090"
    )
    try:
        serving.failure = StoreUnavailable("hbase", java)
        body = assert_error_shape(client.get(f"{VIEWS}/page_views?url=/&granularity=hour"), settings, 503)
        assert body["component"] == "hbase" and "hbase" in body["detail"]
        serving.failure = StoreUnavailable("cassandra", "NoHostAvailable: ('Unable to connect', {'127.0.0.1:9042'})")
        body = assert_error_shape(client.get(f"{VIEWS}/top_pages?granularity=hour"), settings, 503)
        assert body["component"] == "cassandra"
        serving.failure = KeyError("/very/internal/path.py")
        body = assert_error_shape(client.get(f"{VIEWS}/page_views?url=/&granularity=hour"), settings, 500)
        assert "internal" not in body["detail"] or "path.py" not in body["detail"]
        assert "path.py" not in json.dumps(body)
    finally:
        serving.failure = Tripwire.failure


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
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
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


# --- the OpenAPI document says what the API does ---------------------------------------------------


def test_openapi_documents_parameters_constraints_and_every_error(client, settings):
    doc = client.get("/openapi.json").json()
    paths = doc["paths"]
    params = {p["name"]: p for p in paths[f"{VIEWS}/page_views"]["get"]["parameters"]}
    assert params["url"]["required"] is True
    assert params["granularity"]["schema"]["enum"] == ["minute", "hour", "day"]
    for name in ("start", "end"):
        schema = params[name]["schema"]
        assert schema["format"] == "date-time" and schema["pattern"], schema
    limit = {p["name"]: p for p in paths[f"{VIEWS}/top_pages"]["get"]["parameters"]}["limit"]["schema"]
    assert (limit["minimum"], limit["maximum"]) == (1, 100)
    by_country = {p["name"]: p for p in paths[f"{VIEWS}/page_views_by_country_device"]["get"]["parameters"]}
    assert by_country["country"]["required"] and by_country["device"]["required"]
    assert by_country["granularity"]["schema"]["enum"] == ["hour", "day"]
    assert {
        f"{VIEWS}/page_views",
        f"{VIEWS}/unique_visitors",
        f"{VIEWS}/top_pages",
        f"{VIEWS}/page_views_by_country_device",
    } <= set(paths)
    assert f"{VIEWS}/{{view_name}}" not in paths, "each declared view has its own route; others are 404s"
    expected = {
        f"{VIEWS}/page_views": {"200", "422", "429", "503"},
        f"{VIEWS}/top_pages": {"200", "422", "429", "503"},
        "/api/v1/events": {"202", "400", "401", "413", "422", "503"},
    }
    for path, codes in expected.items():
        (operation,) = paths[path].values()
        assert set(operation["responses"]) == codes, (path, operation["responses"].keys())
    error_ref = "#/components/schemas/ErrorBody"
    for path, item in paths.items():
        for _method, operation in item.items():
            for code, response in operation["responses"].items():
                if code.startswith(("4", "5")):
                    assert response["content"]["application/json"]["schema"] == {"$ref": error_ref}, (path, code)
    body = paths["/api/v1/events"]["post"]["requestBody"]
    assert body["required"] and body["content"]["application/json"]["schema"]["type"] == "array"
    assert paths["/api/v1/events"]["post"]["security"]
