"""The unauthenticated status routes cost the stores a bounded amount whatever the request rate (no
service: the probes are counted, not run; the reports are files): /health probes the stores once per
short period, however many ask at once; /api/v1/reports parses each report file once and lists at
most `limit` of them."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from api.routes import health as health_route


@pytest.fixture
def counted_probes(monkeypatch, client):
    from stores import health as probes

    calls = {"n": 0}
    gate = threading.Event()

    def probe(_settings) -> str:
        calls["n"] += 1
        gate.wait(2)  # a slow store: every request arrives while the first probe runs
        return "ok"

    for name in ("kafka", "hdfs_namenode", "hbase_thrift", "cassandra", "archiver", "speed_layer"):
        monkeypatch.setattr(probes, name, probe)
    health_route.forget_health(client.app)
    yield calls, gate
    health_route.forget_health(client.app)


def test_health_asked_by_many_at_once_probes_each_store_once_and_again_only_after_its_period(
    client, counted_probes, monkeypatch
):
    calls, gate = counted_probes
    with ThreadPoolExecutor(16) as pool:
        answers = [pool.submit(client.get, "/health") for _ in range(16)]
        time.sleep(0.3)
        gate.set()
        bodies = [a.result().json() for a in answers]
    assert calls["n"] == 6, "one probe per store for 16 requests"
    assert all(b["components"]["kafka"]["state"] == "ok" for b in bodies)
    client.get("/health")
    assert calls["n"] == 6, "within the period: the same answer"
    monkeypatch.setattr(health_route, "HEALTH_PERIOD_S", 0.0)  # the period has passed
    client.get("/health")
    assert calls["n"] == 12, "after the period: probed again"


def test_while_a_workers_first_probe_is_slow_other_requests_say_so_instead_of_holding_threads(
    client, counted_probes, monkeypatch
):
    """Before a worker's first answer every request waited for it, each holding one of the threads
    view queries run on, for as long as the stores took to answer (up to api.health_timeout_s)."""
    calls, gate = counted_probes
    monkeypatch.setattr(health_route, "FIRST_WAIT_S", 0.2)
    with ThreadPoolExecutor(8) as pool:
        first = pool.submit(client.get, "/health")
        while calls["n"] == 0:  # the first request is probing
            time.sleep(0.01)
        started = time.monotonic()
        waiting = [pool.submit(client.get, "/health") for _ in range(6)]
        bodies = [a.result().json() for a in waiting]
        waited = time.monotonic() - started
        gate.set()
        assert first.result().json()["status"] == "ok"
    assert waited < 1.5, f"the others waited {waited:.1f}s"
    assert all(b["status"] == "probing" and b["components"] == {} and "ask again" in b["detail"] for b in bodies)
    assert calls["n"] == 6, "still one probe per store"
    assert client.get("/health").json()["status"] == "ok", "then the kept answer"


def test_status_asked_by_many_at_once_reads_hdfs_once_per_period(client, monkeypatch):
    """Each /api/v1/status read the speed layer's progress and the completeness markers from HDFS:
    unauthenticated and uncached, a request rate became three times as many NameNode requests."""
    from serving_layer.service import StoreUnavailable
    from stores import completeness, progress

    calls = {"n": 0}
    gate = threading.Event()

    def read_progress(_settings, _job):
        calls["n"] += 1
        gate.wait(2)
        return {"queries": {}}

    monkeypatch.setattr(progress, "read_progress", read_progress)
    monkeypatch.setattr(completeness, "latest", lambda _settings: None)
    client.app.state.serving.failure = StoreUnavailable("hbase", "not read in this test")  # said in the body
    health_route.forget_health(client.app)
    with ThreadPoolExecutor(16) as pool:
        answers = [pool.submit(client.get, "/api/v1/status") for _ in range(16)]
        time.sleep(0.3)
        gate.set()
        bodies = [a.result().json() for a in answers]
    assert calls["n"] == 1, "one read for 16 requests"
    assert all(b["master_dataset"] == {"complete_before": None, "lag_s": None} for b in bodies)
    monkeypatch.setattr(health_route, "HEALTH_PERIOD_S", 0.0)
    client.get("/api/v1/status")
    assert calls["n"] == 2, "after the period: read again"
    health_route.forget_health(client.app)


def test_the_reports_list_reads_each_file_once_and_at_most_limit_of_them(client, settings, monkeypatch):
    from reports import storage

    folder = storage.reports_dir(settings)
    folder.mkdir(parents=True, exist_ok=True)
    made = []
    for i in range(5):
        rid = f"20990101T0000{i:02d}-abc{i:03d}"
        (folder / f"{rid}.json").write_text(json.dumps({"created": f"c{i}", "summary": {"i": i}, "big": "x" * 1000}))
        made.append(rid)
    parsed = []
    real = json.loads

    def counting(text, *args, **kwargs):
        if isinstance(text, str) and '"big"' in text:  # one of these report files, not a response body
            parsed.append(1)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(storage.json, "loads", counting)
    try:
        first = client.get("/api/v1/reports", params={"limit": 3}).json()["reports"]
        assert [r["id"] for r in first][:3] == sorted(made, reverse=True)[:3] and len(first) == 3
        assert "big" not in json.dumps(first)
        before = len(parsed)
        again = client.get("/api/v1/reports", params={"limit": 3}).json()["reports"]
        assert again == first and len(parsed) == before, "unchanged files are not parsed again"
        assert client.get("/api/v1/reports", params={"limit": 0}).status_code == 422
        assert client.get("/api/v1/reports", params={"limit": 10**9}).status_code == 422
    finally:
        for rid in made:
            (folder / f"{rid}.json").unlink()


def test_a_report_page_is_sent_in_chunks_with_its_policy(client, settings):
    """Its whole text was handed to the transport at once: a client reading slowly (under the stall
    guard's pace) held a page of megabytes per connection, asked without a token."""
    from api.routes import reports as route
    from reports import storage

    folder = storage.reports_dir(settings)
    folder.mkdir(parents=True, exist_ok=True)
    rid = "20990101T000000-page001"
    page = "<!doctype html><p>" + "x" * (3 << 20) + "</p>"
    (folder / f"{rid}.html").write_text(page)
    try:
        response = route.get_report_html(rid, settings)

        async def chunk_sizes() -> list[int]:
            return [len(chunk) async for chunk in response.body_iterator]

        sizes = asyncio.run(chunk_sizes())
        assert sum(sizes) == len(page) and max(sizes) <= 1 << 16, (len(sizes), max(sizes))
        answer = client.get(f"/api/v1/reports/{rid}/html")
        assert answer.status_code == 200 and answer.text == page
        assert answer.headers["content-type"] == "text/html; charset=utf-8"
        assert "default-src 'none'" in answer.headers["content-security-policy"]
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert client.get("/api/v1/reports/20990101T000000-absent1/html").status_code == 404
    finally:
        (folder / f"{rid}.html").unlink()


def test_the_reports_list_takes_a_limit_in_decimal_digits_only(client):
    """`limit=1_0` was read as 10."""
    for value in ("1_0", "3.0", "+3", " 3"):
        resp = client.get("/api/v1/reports", params={"limit": value})
        assert resp.status_code == 422 and "decimal digits" in resp.text, (value, resp.text)
    assert client.get("/api/v1/reports", params={"limit": "3"}).status_code == 200
