"""What one POST /api/v1/events body may cost the API: a body of 4 MiB of empty objects parsed into
~1.4 million dicts (~100 MB, 1.4 s of the interpreter) before the per-request cap was checked, and
nothing bounded how many such parses ran at once (40 threads: ~4 GB per worker). Large bodies are
now parsed one at a time per worker process; small ones never wait for them. And an event's size is its UTF-8 size, as on Kafka: a
non-ASCII event was measured with every character escaped (\\uXXXX), refused at a third of its limit."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.routes import events as route
from tests.support.tripwire_api import LOCAL_URL, token


def event(url: str) -> dict:
    return {
        "event_id": "3f1c6a52-0d7e-4c8e-9a57-2f1e1b0c9d11",
        "event_time": "2026-11-21T10:00:00.123Z",
        "user_id": "u-829",
        "url": url,
        "event_type": "page_view",
    }


def test_an_event_is_measured_in_utf8_as_kafka_holds_it(settings):
    url = "/" + "商品" * 400  # 2,401 bytes of UTF-8; 4,801 as \\uXXXX escapes
    try:
        ((key, value),) = route.check_events(settings, json.dumps([event(url)], ensure_ascii=False).encode())
    except route.ApiError as exc:
        raise AssertionError(exc.errors) from None
    assert len(value) < settings.events.max_record_bytes
    assert json.loads(value)["url"] == url and "商品".encode() in value


def test_large_request_bodies_are_parsed_one_at_a_time_per_worker(settings, monkeypatch):
    """The first large body's parse holds until the four small ones are parsed (at most 5 s), and
    they start only once it runs: had they waited for the large ones, none would be parsed beside it.
    (It slept 50 ms instead, and on a busy machine the small ones were all parsed before it began.)"""
    running, most, small_beside, smalls = 0, 0, False, 0
    lock = threading.Lock()
    large_started, smalls_parsed = threading.Event(), threading.Event()
    real = route._checked

    def counted(settings, data):
        nonlocal running, most, small_beside, smalls
        if len(data) <= route.LARGE_BODY_BYTES:
            large_started.wait(5)
            with lock:
                small_beside = small_beside or running > 0
            try:
                return real(settings, data)
            finally:
                with lock:
                    smalls += 1
                    if smalls == 4:
                        smalls_parsed.set()
        with lock:
            running += 1
            most = max(most, running)
        large_started.set()
        try:
            smalls_parsed.wait(5)
            return real(settings, data)
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(route, "_checked", counted)
    app = create_app(settings)
    # Invalid events, answered 422 before Kafka is reached; large bodies, and small ones beside them.
    body = json.dumps([{}] * 5).encode() + b" " * route.LARGE_BODY_BYTES
    small = json.dumps([{}] * 5).encode()

    async def post_many() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {token(settings)}", "Content-Type": "application/json"}
        async with httpx.AsyncClient(transport=transport, base_url=LOCAL_URL) as client:
            answers = await asyncio.gather(
                *(client.post("/api/v1/events", content=body, headers=headers) for _ in range(6)),
                *(client.post("/api/v1/events", content=small, headers=headers) for _ in range(4)),
            )
        return [a.status_code for a in answers]

    with TestClient(app, base_url=LOCAL_URL):  # its startup
        assert asyncio.run(post_many()) == [422] * 10
    assert most == 1, f"{most} large bodies were parsed at once"
    assert small_beside, "a small body waited for the large ones"


def test_while_kafka_is_slow_few_produces_hold_threads_and_the_others_get_a_503(settings, monkeypatch):
    """Each produce held a worker thread for up to ~20 s while Kafka was away, with no bound: forty
    POSTs took every thread view queries run on. PRODUCE_THREADS run; others wait, holding none,
    then are told Kafka is slow."""
    running, most = 0, 0
    lock = threading.Lock()
    release = threading.Event()

    def slow_produce(request, settings, payloads):
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        try:
            release.wait(5)
            return [type("Position", (), {"partition": 0, "offset": i})() for i in range(len(payloads))]
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(route, "produce", slow_produce)
    monkeypatch.setattr(route, "PRODUCE_WAIT_S", 0.5)
    app = create_app(settings)
    body = json.dumps([event("/a")]).encode()

    async def post_many() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {token(settings)}", "Content-Type": "application/json"}
        async with httpx.AsyncClient(transport=transport, base_url=LOCAL_URL, timeout=30) as client:
            posts = [
                client.post("/api/v1/events", content=body, headers=headers) for _ in range(route.PRODUCE_THREADS + 3)
            ]

            async def later() -> None:
                await asyncio.sleep(1.0)  # past PRODUCE_WAIT_S: the waiting ones were refused
                release.set()

            answers = await asyncio.gather(*posts, later())
        return sorted(a.status_code for a in answers[:-1])

    with TestClient(app, base_url=LOCAL_URL):
        assert asyncio.run(post_many()) == [202] * route.PRODUCE_THREADS + [503] * 3
    assert most == route.PRODUCE_THREADS


def test_request_bodies_held_at_once_are_bounded_per_worker_and_the_others_get_a_429(settings, monkeypatch):
    """Each POST read its whole body (up to api.max_body_bytes) before it waited for anything, and
    nothing bounded how many were held at once: a thousand connections with the token held ~4 GB.
    Bodies take room from api.max_bodies_mib as they are read and give it back when answered."""
    api = settings.api.model_copy(update={"max_bodies_mib": 1, "max_body_bytes": 400 * 1024})
    settings = settings.model_copy(update={"api": api})
    held, release = threading.Semaphore(0), threading.Event()
    real = route._checked

    def holding(settings, data):
        held.release()
        release.wait(10)
        return real(settings, data)

    monkeypatch.setattr(route, "_checked", holding)
    app = create_app(settings)
    body = json.dumps([{}] * 5).encode() + b" " * (300 * 1024)  # invalid events: 422 before Kafka

    async def post_many() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {token(settings)}", "Content-Type": "application/json"}
        async with httpx.AsyncClient(transport=transport, base_url=LOCAL_URL, timeout=30) as client:
            posts = {
                asyncio.ensure_future(client.post("/api/v1/events", content=body, headers=headers)) for _ in range(5)
            }
            # Three bodies of 300 KiB fit in 1 MiB, and are held: the other two are refused without waiting.
            done: set = set()
            while len(done) < 2:
                finished, _ = await asyncio.wait(posts - done, timeout=10, return_when=asyncio.FIRST_COMPLETED)
                assert finished, "no body was refused"
                done |= finished
            refused = [t.result() for t in done]
            assert [a.status_code for a in refused] == [429, 429] and all(a.headers["retry-after"] for a in refused)
            assert "api.max_bodies_mib" in refused[0].json()["detail"]
            release.set()
            answered = await asyncio.gather(*(posts - done))
            again = await client.post("/api/v1/events", content=body, headers=headers)  # the room came back
        return sorted(a.status_code for a in [*answered, again])

    with TestClient(app, base_url=LOCAL_URL):
        assert asyncio.run(post_many()) == [422] * 4


def test_room_for_bodies_below_one_body_is_refused():
    from definitions.service_settings import ApiSettings

    with pytest.raises(ValueError, match="max_bodies_mib"):
        ApiSettings(max_bodies_mib=4, max_body_bytes=8 * 1024 * 1024)
    assert ApiSettings(max_bodies_mib=8, max_body_bytes=8 * 1024 * 1024).max_bodies_mib == 8
    # Unset, it follows a body limit raised past 64 MiB: settings that loaded before keep loading.
    assert ApiSettings(max_body_bytes=100 * 2**20).bodies_bytes() == 100 * 2**20
    assert ApiSettings().bodies_bytes() == 64 * 2**20


@pytest.mark.parametrize(
    "body",
    [
        b"[" + b"{}," * 700_000 + b"{}]",  # too many events: refused after the parse
        b'[{"x": [' + b"{}," * 700_000 + b"{}]}]",  # one event of 700,000 objects: refused as oversized
    ],
)
def test_a_refused_body_frees_what_its_parse_made_at_once(settings, body):
    """A refused body's parse (700,000 dicts here) stayed referenced by the refusal's traceback, in
    a reference cycle only a full collection frees, and the API makes those rare: a worker grew
    ~100 MB for each 4 MiB body refused, to 2.5 GB. Freed when the refusal is made now, with the
    collector off: the exception is held as a handler holds it."""
    import gc
    import sys

    gc.collect()
    gc.disable()
    try:
        before = sys.getallocatedblocks()
        try:
            route.check_events(settings, body)
        except route.ApiError as exc:
            refusal = exc
        grown = sys.getallocatedblocks() - before
    finally:
        gc.enable()
    assert refusal.status == 422, refusal.detail
    assert grown < 50_000, f"{grown:,} blocks still held after the refusal"


def test_bodies_declared_but_not_sent_hold_no_room(settings):
    """The room was taken for the whole declared length before a byte came: forty connections
    declaring 4 MiB and sending only `[` (1.4 KB in all) refused every POST for a minute. Room is
    taken as bytes arrive now. (Called as the server calls the app: a client library sends the body
    before the app reads it.)"""
    api = settings.api.model_copy(update={"max_bodies_mib": 1, "max_body_bytes": 400 * 1024})
    settings = settings.model_copy(update={"api": api})
    app = create_app(settings)

    def request(body_parts: list[bytes], declared: int, release: asyncio.Event | None):
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/api/v1/events",
            "raw_path": b"/api/v1/events",
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"host", b"127.0.0.1"),
                (b"authorization", f"Bearer {token(settings)}".encode()),
                (b"content-type", b"application/json"),
                (b"content-length", str(declared).encode()),
            ],
            "client": ("127.0.0.1", 5000),
            "server": ("127.0.0.1", 8000),
        }
        parts = list(body_parts)
        status: list[int] = []

        async def receive():
            if parts:
                part = parts.pop(0)
                if parts and release is not None:
                    await release.wait()  # the rest comes only when released
                return {"type": "http.request", "body": part, "more_body": bool(parts)}
            await asyncio.Event().wait()  # no disconnect while the app answers
            return {"type": "http.disconnect"}

        async def send(message):
            if message["type"] == "http.response.start":
                status.append(message["status"])

        async def run() -> int:
            await app(scope, receive, send)
            return status[0]

        return run()

    async def post_many() -> tuple[list[int], int]:
        release = asyncio.Event()
        room = 2**20
        sizes = [400 * 1024, 400 * 1024, room - 800 * 1024]  # the whole room declared; one byte of each sent
        held = [asyncio.ensure_future(request([b"[", b" " * (size - 2) + b"]"], size, release)) for size in sizes]
        await asyncio.sleep(0.2)
        small = json.dumps([{}]).encode()
        sent = await request([small], len(small), None)
        release.set()
        return sorted(await asyncio.gather(*held)), sent

    with TestClient(app, base_url=LOCAL_URL):
        stalled, sent = asyncio.run(post_many())
    assert sent == 422, "the small body was read and judged (invalid events: 422), not refused for room"
    assert stalled == [422, 422, 422], stalled  # each read whole once sent: together they fill the room


def post_and_find_holders(settings, body: bytes):
    """POST `body` with the collector off: the answer, and what still holds a copy of the body's
    bytes once it is answered (frames by name, other objects by type)."""
    import gc
    import types

    app = create_app(settings)
    with TestClient(app, base_url=LOCAL_URL) as client:
        gc.collect()
        gc.disable()
        try:
            answer = client.post("/api/v1/events", content=body, headers={"Authorization": f"Bearer {token(settings)}"})
            holders = [
                f"{o.f_code.co_name}" if isinstance(o, types.FrameType) else type(o).__name__
                for o in gc.get_objects()
                if any(isinstance(x, bytes) and x is not body and x == body for x in gc.get_referents(o))
            ]
        finally:
            gc.enable()
    return answer, holders


def test_a_refused_body_is_held_by_nothing_once_answered(settings):
    """The refusal crossed the thread pool and was kept in a local of the frame that raised it: in
    the cycles this made, every frame of the request stayed, the body's 4 MiB among them, until a
    full collection. With the collector off, nothing holds a body's bytes once it is answered."""
    body = json.dumps([{}] * 2_000).encode() + b" " * (2 * 2**20)  # too many events; 2 MiB
    answer, holders = post_and_find_holders(settings, body)
    assert answer.status_code == 422 and "too many events" in answer.json()["detail"], answer.text
    assert holders == [], f"the body is still held by {holders}"


def test_events_kafka_did_not_acknowledge_are_held_by_nothing_once_answered(settings, monkeypatch):
    """The 503 of a produce that failed kept the produce's exception as its context, raised across
    the thread pool: the request's frames, its body among them, stayed until a full collection."""

    def fails(request, settings, payloads):
        raise RuntimeError("Kafka is away")

    monkeypatch.setattr(route, "produce", fails)
    body = json.dumps([event("/kafka-away")]).encode() + b" " * (2 * 2**20)
    answer, holders = post_and_find_holders(settings, body)
    assert answer.status_code == 503, answer.text
    assert holders == [], f"the body is still held by {holders}"


def test_a_produce_kafka_refused_leaves_no_cycle_holding_its_records(settings):
    """produce keeps the first failure of its records to raise it once every record is settled:
    raised from a local, its frame held the exception and the exception its frame (the request's
    records, futures and all), a cycle only a full collection frees, and the API makes those rare."""
    import gc
    import weakref
    from types import SimpleNamespace

    class Failed:
        def get(self, timeout):
            raise TimeoutError("not acknowledged")

    futures: list = []

    def send(topic, key, value):
        futures.append(Failed())
        return futures[-1]

    request = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(producer=lambda: SimpleNamespace(send=send))))
    gc.collect()
    gc.disable()
    try:
        try:
            route.produce(request, settings, [(b"k", b"v"), (b"k", b"w")])  # type: ignore[arg-type]
        except TimeoutError:
            pass
        held = [weakref.ref(f) for f in futures]
        futures.clear()
        alive = sum(ref() is not None for ref in held)
    finally:
        gc.enable()
    assert alive == 0, f"{alive} of the request's futures still held after it was answered"
