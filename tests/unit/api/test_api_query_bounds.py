"""The API bounds a view query before doing it, and its errors have one shape (issue 15): the
window, the parameters, the routes, the number of queries at once, store failures, and what the
OpenAPI document says of them. No service is needed: every request here is answered before the
serving layer is reached. The serving layer is a tripwire that fails the request if a query gets to
it; it is no stand-in for a store."""

from __future__ import annotations

import json
import time
import tracemalloc

import anyio
import pytest

from serving_layer.service import StoreUnavailable
from tests.support.tripwire_api import Tripwire, assert_error_shape, make_client

VIEWS = "/api/v1/views"


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
        # a count is decimal digits: these were read as 10
        ("top_pages?limit=1_0", "limit"),
        ("top_pages?limit=10.0", "limit"),
        ("top_pages?limit=%2B10", "limit"),
        ("top_pages?limit=%2010", "limit"),
        ("page_views_by_country_device?country=DE", "device"),
        ("page_views", "url"),
        ("page_views?url=", "url"),
        ("page_views?url=/&partial=maybe", "partial"),
        # a key no event can hold (the event contract's rules for the field)
        ("page_views_by_country_device?country=de&device=mobile&granularity=day", "country"),
        ("page_views_by_country_device?country=DE&device=phone&granularity=day", "device"),
        (f"page_views?url=/{'x' * settings.events.max_url_chars}", "url"),
        ("page_views?url=no-slash", "url"),
        ("page_views?url=/a%00b", "url"),
        ("page_views?url=/a%0Ab", "url"),
        ("page_views?url=/a%7F", "url"),
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


def test_one_client_cannot_take_every_query_slot(settings):
    """Eight slow top-N queries of one client (no token needed) took every slot of a worker, and
    everyone else got 429s."""
    capped = settings.model_copy(update={"api": settings.api.model_copy(update={"max_queries_per_client": 2})})
    for client in make_client(capped):
        running = client.app.state.client_queries
        me = "testclient"  # the address Starlette's test client gives
        running[me] = 2  # two of its queries are running
        try:
            started = time.perf_counter()
            resp = client.get(f"{VIEWS}/page_views", params={"url": "/", "granularity": "hour"})
            assert time.perf_counter() - started < 1, "refused at once, not after a wait for a slot"
        finally:
            running[me] = 0
        body = assert_error_shape(resp, capped, 429)
        assert "api.max_queries_per_client" in body["detail"] and resp.headers["retry-after"] == "1"
        del running[me]
        # under the cap, the query goes on (to the tripwire, which answers the generic 500) and
        # leaves no count behind, answered or refused
        assert client.get(f"{VIEWS}/page_views", params={"url": "/", "granularity": "hour"}).status_code == 500
        assert running == {}
    from api.routes.views import _on_this_host

    # This host's own clients are not capped (its tools and benchmarks, a proxy naming no client).
    assert _on_this_host("127.0.0.1") and _on_this_host("::1") and not _on_this_host("203.0.113.7")
    assert _on_this_host("::ffff:127.0.0.1"), "this host's IPv4 tools on a dual-stack socket"
    assert not _on_this_host("::ffff:203.0.113.7")


def test_the_ipv6_addresses_of_one_client_count_together():
    """A client with an IPv6 /64 sent each query from another address of it and took every slot."""
    from api.routes.views import client_key

    one = {client_key(f"2001:db8:1:2:{n:x}::{n:x}") for n in range(1, 500)}
    assert one == {"2001:db8:1:2::/64"}
    assert client_key("2001:db8:1:3::1") != client_key("2001:db8:1:2::1"), "another /64 is another client"
    assert client_key("::ffff:203.0.113.7") == client_key("203.0.113.7") == "203.0.113.7"
    assert client_key("203.0.113.8") != client_key("203.0.113.7")
    assert client_key("testclient") == "testclient" and client_key("") == ""


def test_the_list_of_views_waits_for_a_query_slot_too(settings):
    """It reads the pointer from HBase: anonymous crowds of it took the worker threads and HBase
    connections view queries wait for, outside the concurrency limit."""
    tight = settings.model_copy(
        update={"api": settings.api.model_copy(update={"max_concurrent_queries": 1, "query_queue_s": 0.1})}
    )
    for client in make_client(tight):
        slots = client.app.state.query_slots
        client.portal.call(slots.acquire)
        try:
            resp = client.get(VIEWS)
        finally:
            client.portal.call(slots.release)
        assert "busy" in assert_error_shape(resp, tight, 429)["detail"]


def test_with_no_queueing_a_free_slot_is_still_taken(settings):
    """api.query_queue_s = 0 means "do not wait for a slot", not "refuse every query"."""
    eager = settings.model_copy(update={"api": settings.api.model_copy(update={"query_queue_s": 0})})
    for client in make_client(eager):
        # the query gets a slot and goes on (to the tripwire, which answers the generic 500)
        assert client.get(f"{VIEWS}/page_views", params={"url": "/", "granularity": "hour"}).status_code == 500
        slots = client.app.state.query_slots
        taken = 0
        try:
            while True:
                slots.acquire_nowait()
                taken += 1
        except anyio.WouldBlock:
            pass
        try:
            resp = client.get(f"{VIEWS}/page_views", params={"url": "/", "granularity": "hour"})
        finally:
            for _ in range(taken):
                client.portal.call(slots.release)
        assert_error_shape(resp, eager, 429)


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


def test_a_window_holding_too_much_realtime_data_is_a_422_naming_the_setting(client, settings):
    from stores.adapters import ReadTooLarge

    serving = client.app.state.serving
    try:
        serving.failure = ReadTooLarge(
            "top_pages: the window holds more than 32 MiB of realtime rows (api.max_read_mib); "
            "ask for a narrower window"
        )
        body = assert_error_shape(client.get(f"{VIEWS}/top_pages?granularity=hour"), settings, 422)
        assert "api.max_read_mib" in body["detail"] and "narrower window" in body["detail"]
    finally:
        serving.failure = Tripwire.failure


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
        f"{VIEWS}/page_views": {"200", "409", "422", "429", "503"},
        f"{VIEWS}/top_pages": {"200", "409", "422", "429", "503"},
        "/api/v1/events": {"202", "400", "401", "413", "415", "422", "503"},
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


def test_a_window_is_rounded_out_to_whole_buckets_and_says_so(settings):
    """An unaligned window was counted over whole buckets (two days for two hours across midnight)
    while the answer echoed the hours asked: a top-N's figures looked like two hours' worth."""
    from api.window import parse_time, resolve_window
    from definitions.view_loading import load_views

    top = next(v for v in load_views(settings) if v.name == "top_pages")
    now = parse_time("2026-11-29T12:00:00Z", "now")
    window = resolve_window(settings.api, top, "day", "2026-11-21T23:00:00Z", "2026-11-22T01:00:00Z", now)
    assert (window.start_s, window.end_s, window.buckets) == (
        parse_time("2026-11-21T00:00:00Z", "start"),
        parse_time("2026-11-23T00:00:00Z", "end"),
        2,
    )
    # A fraction of a second is part of the window: an end of 10:00:00.9 reaches into that second.
    minute = resolve_window(settings.api, top, "minute", "2026-11-21T10:00:00.5Z", "2026-11-21T10:00:00.9Z", now)
    assert (minute.start_s, minute.end_s) == (
        parse_time("2026-11-21T10:00:00Z", "s"),
        parse_time("2026-11-21T10:01:00Z", "e"),
    )
    aligned = resolve_window(settings.api, top, "hour", "2026-11-21T10:00:00Z", "2026-11-21T12:00:00.000Z", now)
    assert (aligned.start_s, aligned.end_s) == (
        parse_time("2026-11-21T10:00:00Z", "s"),
        parse_time("2026-11-21T12:00:00Z", "e"),
    )


def test_a_parameter_given_twice_is_a_422_naming_it(client, settings):
    """?url=/a&url=/b answered for /b alone, without a word."""
    resp = client.get(f"{VIEWS}/page_views?url=/a&url=/b&granularity=hour")
    body = assert_error_shape(resp, settings, 422)
    assert "url: given more than once" in body["detail"], body
    resp = client.get(f"{VIEWS}/top_pages?limit=5&limit=6")
    assert "limit: given more than once" in assert_error_shape(resp, settings, 422)["detail"]


@pytest.mark.parametrize(
    "query, unknown",
    [
        # ?from=…&to=… answered the default window (the last hour or so), as if asked for it
        ("page_views?url=/a&from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z", ["from", "to"]),
        ("top_pages?limt=50", ["limt"]),  # a misspelled limit answered 10 rows
        ("page_views_by_country_device?country=DE&device=mobile&Start=2026-01-01T00:00:00Z", ["Start"]),
        ("page_views?url=/a&=1", [""]),
    ],
)
def test_a_parameter_the_route_does_not_take_is_a_422_naming_it_and_those_it_takes(client, settings, query, unknown):
    """An unknown parameter was passed over: a misspelled one answered for the default instead."""
    body = assert_error_shape(client.get(f"{VIEWS}/{query}"), settings, 422)
    named = ", ".join(n or "(an empty name)" for n in unknown)
    assert body["detail"].startswith(f"{named}: not a parameter of this view"), body
    assert "granularity, start, end, partial" in body["detail"], body
    assert [e["loc"] for e in body["errors"]] == [["query", n] for n in unknown], body


def test_an_error_names_a_few_unknown_parameters_and_counts_the_rest(client, settings):
    query = "&".join(f"{'x' * 100}{i:03}=1" for i in range(40))
    body = assert_error_shape(client.get(f"{VIEWS}/top_pages?{query}"), settings, 422)
    assert body["detail"].startswith(", ".join(["x" * 32] * 3) + " and 37 more: not a parameter"), body
    assert body["detail"].endswith("it takes granularity, start, end, partial, limit"), body
    assert len(body["errors"]) == 3, body


@pytest.mark.parametrize("value", ["/%ff%fe", "/%ed%a0%80", "/a%c3"])
def test_a_parameter_that_is_no_utf8_text_is_a_422_naming_it(client, settings, value):
    """Such bytes were replaced by U+FFFD: the answer was for a key no client asked for."""
    body = assert_error_shape(client.get(f"{VIEWS}/page_views?url={value}&granularity=hour"), settings, 422)
    assert body["detail"].startswith("url: not UTF-8 text"), body


def test_the_dashboard_asks_only_for_parameters_the_views_take(client, settings):
    """The dashboard builds its queries by hand: each parameter it sends is one the routes take."""
    import re
    from pathlib import Path

    script = (Path(__file__).parents[3] / "api" / "static" / "dashboard.js").read_text()
    asked = set(re.findall(r"[?&`]([a-z_]+)=", script))
    assert asked == {"url", "granularity", "start", "end", "limit"}, asked
    valid = {"granularity": "hour", "start": "2026-11-20T00:00:00Z", "end": "2026-11-20T06:00:00Z", "limit": "5"}
    serving = client.app.state.serving
    try:
        serving.failure = StoreUnavailable("hbase", "reached")  # the query passed every check
        for route, taken in (("page_views", asked - {"limit"}), ("top_pages", asked - {"url"})):
            query = "&".join(f"{n}={valid.get(n, '/a')}" for n in sorted(taken))
            assert client.get(f"{VIEWS}/{route}?{query}").status_code == 503, query
    finally:
        serving.failure = Tripwire.failure


def test_a_key_longer_in_bytes_than_any_event_is_a_422_naming_it(settings):
    """Keys were bounded in characters only: with a raised events.max_url_chars, a URL of four-byte
    characters past the row key's 65535 bytes reached the stores and answered a 500."""
    from urllib.parse import quote

    big = settings
    url = "/" + "\U0001f600" * 2_000  # within events.max_url_chars, 8,001 bytes: more than any event holds
    assert len(url) <= settings.events.max_url_chars < len(url.encode()) and settings.events.max_record_bytes < 8_001
    for client in make_client(big):
        resp = client.get(f"{VIEWS}/page_views?url={quote(url)}&granularity=hour")
        body = assert_error_shape(resp, big, 422)
        assert "url" in body["detail"] and "bytes" in body["detail"], body


@pytest.mark.parametrize("failure", ["too large", "store"])
def test_a_refused_query_lets_go_of_what_it_read_once_answered(client, settings, failure):
    """A refusal raised across the thread pool stayed in a reference cycle with every frame it
    passed, and what each held: the rows a query read before it was refused (up to api.max_read_mib)
    stayed until a full collection, which the API makes rare. With the collector off, a query that
    read 300,000 rows and was refused leaves them to no one once answered."""
    import gc
    import sys

    from stores.adapters import ReadTooLarge

    serving = client.app.state.serving

    def reads_then_fails(*_a, **_k):
        rows = [(f"/page/{i}", i) for i in range(300_000)]  # noqa: F841 - held by this frame when it raises
        if failure == "too large":
            raise ReadTooLarge("page_views: narrow the window")
        raise StoreUnavailable("hbase", "x")

    original = serving.series
    serving.series = reads_then_fails
    try:
        gc.collect()
        gc.disable()
        try:
            before = sys.getallocatedblocks()
            answer = client.get(f"{VIEWS}/page_views?url=/&granularity=hour")
            grown = sys.getallocatedblocks() - before
        finally:
            gc.enable()
    finally:
        serving.series = original
    assert answer.status_code == (422 if failure == "too large" else 503), answer.text
    assert grown < 100_000, f"{grown:,} blocks still held once answered"
