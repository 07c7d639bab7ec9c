"""The API's contract on the real stores, in process: clear 422s, the token, OpenAPI, metrics."""

from __future__ import annotations

import re
import time
import uuid
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.app import InsecureSettings, create_app
from definitions.events import format_time
from tests.support.polling import wait_for
from tests.support.tripwire_api import LOCAL_URL


@pytest.fixture(scope="module")
def client(settings, stack):
    with TestClient(create_app(settings), base_url=LOCAL_URL) as c:
        yield c


def auth(settings) -> dict:
    return {"Authorization": f"Bearer {settings.api.token.get_secret_value()}"}


@pytest.mark.parametrize(
    "path, message",
    [
        ("/api/v1/views/page_views?url=/&granularity=week", "granularity: Input should be 'minute', 'hour' or 'day'"),
        (
            "/api/v1/views/page_views_by_country_device?country=DE&device=mobile&granularity=minute",
            "granularity: Input should be 'hour' or 'day'",
        ),
        ("/api/v1/views/page_views?url=/&start=2026-11-21T10:00:00Z&end=2026-11-21T09:00:00Z", "must be before end"),
        ("/api/v1/views/page_views?url=/&start=yesterday", "start: not an ISO-8601 time"),
        (
            "/api/v1/views/page_views?url=/&granularity=minute&start=2026-01-01T00:00:00Z&end=2026-11-01T00:00:00Z",
            "range too large",
        ),
        ("/api/v1/views/top_pages?limit=0", "limit: Input should be greater than or equal to 1"),
        ("/api/v1/views/top_pages?limit=1000", "limit: Input should be less than or equal to 100"),
        ("/api/v1/views/page_views_by_country_device?country=DE", "device: Field required"),
        ("/api/v1/views/page_views", "Field required"),
    ],
)
def test_bad_queries_get_clear_422s(client, path, message):
    resp = client.get(path)
    assert resp.status_code == 422, resp.text
    assert message in resp.json()["detail"]


def test_an_unknown_view_is_a_404_naming_the_declared_ones(client):
    resp = client.get("/api/v1/views/nope?url=/")
    assert resp.status_code == 404, resp.text
    assert "unknown view 'nope'" in resp.json()["detail"] and "page_views_by_country_device" in resp.json()["detail"]


def test_views_listing_describes_every_declared_view(client):
    views = {v["name"]: v for v in client.get("/api/v1/views").json()["views"]}
    assert set(views) >= {"page_views", "unique_visitors", "top_pages", "page_views_by_country_device"}
    assert views["page_views_by_country_device"]["keys"] == ["country", "device"]
    assert views["top_pages"]["layout"] == "by_bucket"


def test_generic_route_serves_the_user_added_view(client):
    resp = client.get("/api/v1/views/page_views_by_country_device?country=DE&device=mobile&granularity=day")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["keys"] == {"country": "DE", "device": "mobile"} and "provenance" in body


def test_events_need_the_token(client, settings):
    event = {
        "event_id": str(uuid.uuid4()),
        "event_time": format_time(datetime.now(UTC)),
        "user_id": "u-api",
        "url": "/api-test",
        "event_type": "page_view",
    }
    assert client.post("/api/v1/events", json=[event]).status_code == 401
    assert client.post("/api/v1/events", json=[event], headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = client.post("/api/v1/events", json=[event], headers=auth(settings))
    assert ok.status_code == 202, ok.text
    assert ok.json()["accepted"] == 1 and ok.json()["positions"][0]["offset"] >= 0


def test_invalid_events_get_per_record_errors_and_nothing_is_sent(client, settings):
    good = {
        "event_id": str(uuid.uuid4()),
        "event_time": "2026-11-21T10:00:00Z",
        "user_id": "u1",
        "url": "/x",
        "event_type": "page_view",
    }
    bad = [good, {**good, "event_type": "hover"}, {**good, "url": 5}, "not an object"]
    resp = client.post("/api/v1/events", json=bad, headers=auth(settings))
    assert resp.status_code == 422
    errors = resp.json()["errors"]
    assert [e["index"] for e in errors] == [1, 2, 3]
    assert errors[0]["error"].startswith("bad value: event_type") and errors[1]["error"].startswith(
        "mistyped field: url"
    )
    assert "none was accepted" in resp.json()["detail"]
    assert client.post("/api/v1/events", json=[], headers=auth(settings)).status_code == 422


def test_default_token_is_refused_outside_development(settings):
    with pytest.raises(InsecureSettings, match="LAMBDA_API__TOKEN"):
        create_app(settings.model_copy(update={"environment": "production"}))
    create_app(
        settings.model_copy(
            update={
                "environment": "production",
                "api": settings.api.model_copy(update={"token": SecretStr("s3cret-value-long-enough")}),
            }
        )
    )


def test_openapi_documents_every_route(client):
    paths = client.get("/openapi.json").json()["paths"]
    for path in (
        "/health",
        "/api/v1/status",
        "/api/v1/views",
        "/api/v1/views/page_views",
        "/api/v1/views/unique_visitors",
        "/api/v1/views/top_pages",
        "/api/v1/views/page_views_by_country_device",
        "/api/v1/events",
        "/api/v1/reports",
        "/api/v1/reports/{report_id}",
    ):
        assert path in paths, path
    params = {p["name"] for p in paths["/api/v1/views/page_views"]["get"]["parameters"]}
    assert {"url", "start", "end", "granularity", "partial"} <= params


def merged_bucket_counters(client) -> dict[tuple[str, str], float]:
    """{(view, part): value} of lambda_merge_buckets_total, parsed from the /metrics exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.labels["view"], s.labels["part"]): s.value
        for family in text_string_to_metric_families(client.get("/metrics").text)
        for s in family.samples
        if s.name == "lambda_merge_buckets_total"
    }


def test_metrics_in_prometheus_format(client, settings):
    """A merged answer adds, per part, exactly the number of its buckets that part contributed to."""
    url = f"/metrics-{uuid.uuid4().hex[:8]}"
    minute = int(time.time()) // 60 * 60
    events = [
        {
            "event_id": str(uuid.uuid4()),
            "event_time": format_time(datetime.fromtimestamp(minute - 60 * i + 1, UTC)),
            "user_id": f"u-metrics-{i}",
            "url": url,
            "event_type": "page_view",
        }
        for i in range(3)
    ]
    assert client.post("/api/v1/events", json=events, headers=auth(settings)).status_code == 202
    query = f"/api/v1/views/page_views?url={url}&granularity=minute"
    wait_for(lambda: client.get(query).json()["total"] == 3, f"the three events of {url} to be counted", timeout_s=120)

    before = merged_bucket_counters(client)
    answer = client.get(query).json()
    after = merged_bucket_counters(client)
    assert answer["total"] == 3 and sum(1 for b in answer["series"] if b["value"]) == 3, answer
    for part in ("batch", "speed"):
        contributed = sum(1 for b in answer["series"] if b[part])
        assert after.get(("page_views", part), 0) - before.get(("page_views", part), 0) == contributed, part
    text = client.get("/metrics").text
    assert "lambda_api_request_seconds_bucket" in text
    assert "lambda_store_errors_total" in text


def test_health_reports_each_component(client):
    body = client.get("/health").json()
    assert set(body["components"]) == {"kafka", "hdfs", "hbase", "cassandra", "archiver", "speed-layer"}
    assert all(c["state"] == "ok" for c in body["components"].values()), body
    # It answers without a token: no store's software version (what an attacker would look up).
    details = " ".join(c["detail"] for c in body["components"].values())
    assert not re.search(r"\d+\.\d+\.\d+", details), details


def test_cors_is_off_unless_configured(client):
    resp = client.get("/api/v1/views", headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in resp.headers
