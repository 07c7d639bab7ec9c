"""A request's line and headers are bounded in size and time (api.http_protocol): a client sending
an endless URL or header, or a head that never ends, gets 4xx and its connection closed, and the
worker goes on answering others. Served by uvicorn on a loopback socket, with a minimal app."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from api import http_protocol
from api.http_protocol import MAX_HEAD_BYTES, MAX_PIPELINED, MAX_URL_BYTES, BoundedHttpToolsProtocol

BIG_CHUNKS = 256  # 16 MiB


async def app(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    if scope["path"] == "/unread":  # an answer that reads no body (as the API's GET routes), at once
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"unread"})
        return
    if scope["path"] == "/big":  # an answer far larger than the socket buffers
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(BIG_CHUNKS):
            await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    if scope["path"] == "/slow":  # a slow answer that reads no body (as the API's GET routes)
        await asyncio.sleep(2 * http_protocol.HEAD_TIMEOUT_S)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"slow"})
        return
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = json.dumps({"path": scope["path"], "body_bytes": size}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
def server(monkeypatch) -> Iterator[tuple[str, int]]:
    monkeypatch.setattr(http_protocol, "HEAD_TIMEOUT_S", 1.0)
    monkeypatch.setattr(http_protocol, "BODY_TIMEOUT_S", 1.5)
    monkeypatch.setattr(http_protocol, "SEND_STALL_S", 1.0)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, http=BoundedHttpToolsProtocol, loop="asyncio", log_config=None, access_log=False)
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield sock.getsockname()
    srv.should_exit = True
    thread.join(10)
    sock.close()


def exchange(address, *parts: bytes, timeout: float = 5.0, pause: float = 0.0) -> bytes:
    """Send `parts` (`pause` seconds apart; stopping early if the server closes), then read until
    the server closes."""
    with socket.create_connection(address, timeout=timeout) as conn:
        try:
            for i, part in enumerate(parts):
                if i and pause:
                    time.sleep(pause)
                conn.sendall(part)
        except (BrokenPipeError, ConnectionResetError):
            pass
        return read_until_closed(conn)


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def ok(address) -> None:
    response = exchange(address, b"GET /still HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status_of(response) == 200 and b'"/still"' in response


def test_an_endless_url_is_refused_with_414_and_the_worker_answers_others(server):
    started = time.monotonic()
    response = exchange(server, b"GET /" + b"a" * (4 * 1024 * 1024))
    assert status_of(response) == 414, response[:200]
    assert b"longer than" in response and b"Traceback" not in response
    assert time.monotonic() - started < 5
    ok(server)


@pytest.mark.parametrize("length", [MAX_URL_BYTES, MAX_URL_BYTES + 1, 70_000, 120_000])
def test_a_url_longer_than_the_parser_reads_is_refused_with_414_whichever_reads_bring_it(server, length):
    """httptools reads URLs of at most 65,535 bytes. A longer one within the head's bound (whose
    first read is not counted) was answered 400 "not a valid HTTP/1.1 request" (a 70 KB URL from
    curl); it is 414 now, naming the bound."""
    head = b"GET /?x=" + b"a" * (length - 4) + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    for parts in ((head,), (head[:MAX_HEAD_BYTES], head[MAX_HEAD_BYTES:]), (head[:1000], head[1000:])):
        response = exchange(server, *parts, pause=0.2)
        if length <= MAX_URL_BYTES:
            assert status_of(response) == 200, response[:200]
        else:
            assert status_of(response) == 414, response[:200]
            assert f"longer than {MAX_URL_BYTES} bytes".encode() in response and b"Traceback" not in response
    ok(server)


def test_an_endless_header_is_refused_with_431(server):
    response = exchange(server, b"GET / HTTP/1.1\r\nHost: x\r\nX-A: " + b"b" * (1024 * 1024))
    assert status_of(response) == 431
    ok(server)


def test_endless_headers_are_refused_with_431(server):
    response = exchange(server, b"GET / HTTP/1.1\r\n", *[b"X-A: b\r\n" * 1000] * 100)
    assert status_of(response) == 431
    ok(server)


def test_a_head_within_the_bound_and_a_large_body_are_served(server):
    header = b"X-Big: " + b"c" * (MAX_HEAD_BYTES // 2) + b"\r\n"
    response = exchange(server, b"GET /near HTTP/1.1\r\nHost: x\r\n" + header + b"Connection: close\r\n\r\n")
    assert status_of(response) == 200 and b'"/near"' in response
    body = b"x" * (4 * MAX_HEAD_BYTES)
    head = b"POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    response = exchange(server, head + body)
    assert status_of(response) == 200 and b'"body_bytes": %d' % len(body) in response


def test_kept_alive_requests_each_get_their_own_bound(server):
    header = b"X-Big: " + b"d" * (MAX_HEAD_BYTES * 3 // 4) + b"\r\n"
    request = b"GET /again HTTP/1.1\r\nHost: x\r\n" + header + b"\r\n"
    last = b"GET /last HTTP/1.1\r\nHost: x\r\n" + header + b"Connection: close\r\n\r\n"
    response = exchange(server, request, request, last)
    assert response.count(b"HTTP/1.1 200") == 3, response[:300]


def test_a_head_that_never_ends_is_refused_with_408(server):
    started = time.monotonic()
    response = exchange(server, b"GET / HTTP/1.1\r\nHost: x\r\n")
    assert status_of(response) == 408 and b"did not arrive within" in response
    assert 0.9 < time.monotonic() - started < 5
    ok(server)


def test_a_connection_that_sends_nothing_is_closed(server):
    started = time.monotonic()
    response = exchange(server)
    assert status_of(response) == 408
    assert time.monotonic() - started < 5


CHUNKED = b"POST /trailers HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"


def test_endless_trailers_are_refused_with_431(server):
    """The parser gathers a chunked body's trailers as it gathers headers: bounded alike."""
    response = exchange(server, CHUNKED + b"0\r\nX-T: ", *[b"a" * MAX_HEAD_BYTES] * 4)
    assert status_of(response) == 431 and b"trailers are longer than" in response, response[:200]
    ok(server)


def test_a_chunked_body_with_short_trailers_and_large_chunks_is_served(server):
    chunk = b"%x\r\n" % (2 * MAX_HEAD_BYTES) + b"z" * (2 * MAX_HEAD_BYTES) + b"\r\n"
    request = CHUNKED + chunk + b"0\r\nX-T: fine\r\n\r\n"
    response = exchange(server, request.replace(b"Host: x", b"Host: x\r\nConnection: close"))
    assert status_of(response) == 200 and b'"body_bytes": %d' % (5 + 2 * MAX_HEAD_BYTES) in response


def test_pipelined_heads_behind_a_slow_answer_are_answered_in_order(server):
    """A head whose end waits behind a slow answer (uvicorn reads no further meanwhile) has its
    time from that answer's end: no 408 overtakes the answers."""
    response = exchange(
        server,
        b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /two HTTP/1.1\r\nHost: x\r\n\r\nGET /thr",
        b"ee HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        pause=0.1,
        timeout=10,
    )
    assert response.startswith(b"HTTP/1.1 200"), response[:200]
    assert response.count(b"HTTP/1.1 200") == 3 and b"408" not in response, response
    assert response.index(b"slow") < response.index(b'"/two"') < response.index(b'"/three"')


def send_until_closed(conn: socket.socket, data: bytes) -> None:
    try:
        conn.sendall(data)
    except OSError:  # the server closed the connection
        pass


def read_until_closed(conn: socket.socket) -> bytes:
    chunks = []
    try:
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def test_requests_pipelined_beyond_the_bound_are_refused_after_the_answers_before(server):
    """One connection pipelining tiny requests behind a slow answer: each read of the event loop
    (256 KiB) held ~9,000 parsed requests waiting, and every answer let another read in: memory
    without end. Up to MAX_PIPELINED wait; the request after them is answered 429 in its turn, and
    the connection closed after a while (closed at once with the client's bytes unread, the kernel
    reset it and dropped answers not yet sent: about every other run here lost the 429)."""
    sent = 20_000
    flood = b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n" + b"GET /p HTTP/1.1\r\nHost: x\r\n\r\n" * sent
    with socket.create_connection(server, timeout=20) as conn:
        sender = threading.Thread(target=send_until_closed, args=(conn, flood), daemon=True)
        sender.start()  # read meanwhile: a client that reads nothing of its answers is dropped
        response = read_until_closed(conn)
        sender.join(20)
    answered = response.count(b"HTTP/1.1 200")
    assert response.startswith(b"HTTP/1.1 200") and b"slow" in response, response[:200]
    assert b"HTTP/1.1 429" in response, (answered, len(response), response[-100:])
    assert 1 + MAX_PIPELINED <= answered <= 1 + 4 * MAX_PIPELINED, answered
    assert response.rindex(b"HTTP/1.1 200") < response.index(b"HTTP/1.1 429")
    assert json.loads(response[response.rindex(b"\r\n\r\n") + 4 :])["detail"].startswith("more than")
    ok(server)


def test_requests_pipelined_within_the_bound_are_all_answered_in_order(server):
    paths = [f"/p{i}".encode() for i in range(MAX_PIPELINED)]
    heads = b"".join(b"GET " + p + b" HTTP/1.1\r\nHost: x\r\n\r\n" for p in paths)
    response = exchange(
        server,
        b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n" + heads,
        b"GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        pause=0.2,
        timeout=10,
    )
    assert b"429" not in response and response.count(b"HTTP/1.1 200") == MAX_PIPELINED + 2, response[-300:]
    where = [response.index(b'"' + p + b'"') for p in paths]
    assert where == sorted(where) and response.index(b'"/last"') > where[-1]


def test_a_head_the_parser_refuses_within_an_oversized_read_gets_its_400(server):
    """The parser refused the first part of a read past the head's bound (400 written, the
    connection's end sent); going on to refuse the same head as too long wrote after that end."""
    bad = b"GET /x HTTP/1.1\r\nBad Name: x\r\nX-A: " + b"a" * (2 * MAX_HEAD_BYTES)
    response = exchange(server, bad)
    assert status_of(response) == 400 and response.count(b"HTTP/1.1 4") == 1, response[:300]
    ok(server)


def test_a_request_the_parser_refuses_behind_a_slow_answer_is_refused_after_it(server):
    """Its 400 was written at once, before the answer to the request before it."""
    response = exchange(
        server, b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /x HTTP/1.1\r\nBad Name: x\r\n\r\n", timeout=10
    )
    assert response.startswith(b"HTTP/1.1 200"), response[:200]
    assert b"HTTP/1.1 400" in response and response.index(b"slow") < response.index(b"HTTP/1.1 400"), response
    ok(server)


def test_a_body_the_parser_refuses_is_answered_400_at_once(server):
    """A bad chunk size in the body of the request being answered: its app waited for the rest of
    the body, and the refusal came as a 408 when the body's time ran out."""
    started = time.monotonic()
    response = exchange(
        server, b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n"
    )
    assert status_of(response) == 400, response[:300]
    assert time.monotonic() - started < http_protocol.BODY_TIMEOUT_S, "not after the body's time"
    ok(server)


def test_a_refusal_behind_a_slow_answer_comes_after_it(server):
    response = exchange(server, b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /" + b"a" * (2 * MAX_HEAD_BYTES), timeout=10)
    assert response.startswith(b"HTTP/1.1 200"), response[:200]
    assert b"HTTP/1.1 414" in response and response.index(b"slow") < response.index(b"HTTP/1.1 414")


def test_a_connection_whose_answer_came_before_its_body_is_closed_when_the_rest_does_not_come(server):
    """A request declaring a body it never sends, answered without reading it: the keep-alive timer
    was armed at the answer and cancelled by the next byte, and nothing ever closed the connection
    (any client could hold as many as the worker has file descriptors). Now the body's time runs on."""
    began = time.monotonic()
    response = exchange(
        server, b"GET /unread HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n", b"a", pause=0.3
    )
    assert status_of(response) == 200 and b"unread" in response, "the answer is whole"
    assert time.monotonic() - began < http_protocol.BODY_TIMEOUT_S + 2, "closed when the body's time is up"


def test_an_answer_before_the_body_reaches_a_client_that_sends_it_all(server):
    """A refusal before the body is read (a bad token, too large): uvicorn drops the rest and the
    client, still sending, gets the answer; the connection then goes on as kept alive."""
    body = b"x" * 2_000_000
    with socket.create_connection(server, timeout=10) as conn:
        conn.sendall(b"POST /unread HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
        conn.sendall(body)  # no reset: the server reads what it does not need
        conn.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
        seen = b""
        while b'"path": "/echo"' not in seen:
            chunk = conn.recv(65536)
            assert chunk, f"closed early: {seen!r}"
            seen += chunk
    assert b"unread" in seen and b'"path": "/echo"' in seen


@pytest.mark.parametrize(
    "head",
    [
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n",
    ],
)
def test_a_body_that_stops_arriving_is_refused_with_408(server, head):
    """A body read by the app that never ends held the request, and its worker's thread, for ever."""
    began = time.monotonic()
    response = exchange(server, head, timeout=10)
    assert status_of(response) == 408 and b"request body did not arrive within" in response
    assert time.monotonic() - began < 5


def test_after_an_unread_body_has_all_come_the_idle_connection_is_closed(server):
    """Its bytes cancelled the keep-alive timer armed at the answer: armed again once it has all come."""
    with socket.create_connection(server, timeout=20) as conn:
        conn.sendall(b"GET /unread HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
        seen = b""
        while b"unread" not in seen:
            seen += conn.recv(65536)
        conn.sendall(b"0123456789")
        began = time.monotonic()
        while conn.recv(65536):
            pass
        assert time.monotonic() - began < 5 + 2, "closed after uvicorn's keep-alive timeout (5 s)"


def test_a_client_that_reads_nothing_of_its_answer_is_dropped(server):
    """uvicorn waited for the socket to drain without a deadline: a client that never read held the
    answer (its coroutine, an open report file) and the connection for as long as it liked."""
    with socket.socket() as conn:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        conn.settimeout(10)
        conn.connect(server)
        conn.sendall(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n")
        time.sleep(3 * http_protocol.SEND_STALL_S)  # reads nothing: the server's buffers fill, then stay full
        received = 0
        try:
            while chunk := conn.recv(1 << 20):
                received += len(chunk)
        except ConnectionResetError:
            pass
    assert received < BIG_CHUNKS * 65536, "the whole answer was still there to read"


def test_a_client_reading_slowly_gets_the_whole_answer(server):
    with socket.socket() as conn:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        conn.settimeout(10)
        conn.connect(server)
        conn.sendall(b"GET /big HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        received = bytearray()
        while chunk := conn.recv(1 << 16):
            received += chunk
            time.sleep(0.001)  # steadily, never a stall as long as SEND_STALL_S
    assert received.count(b"x") == BIG_CHUNKS * 65536


@pytest.mark.parametrize(
    "head",
    [
        b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"GET /x HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n",
        b"G\x00T /x HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
)
def test_a_request_the_parser_refuses_gets_the_apis_error_body(server, head, caplog):
    """uvicorn answered these in text/plain, without the API's headers: every error answer is JSON.
    It logged each at WARNING too, once per request a client sends (a flood of lines, beside the
    API's own line, which repeats only so often)."""
    caplog.set_level(logging.INFO)
    response = exchange(server, head)
    assert status_of(response) == 400
    headers, _, body = response.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in headers.lower()
    assert json.loads(body)["detail"].startswith("not a valid HTTP/1.1 request")
    ok(server)
    said = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert ("lambda.api", logging.INFO, "refused a request head (400): " + json.loads(body)["detail"]) in said, said
    assert not [s for s in said if s[1] >= logging.WARNING], said


def answered_first(conn: socket.socket) -> None:
    """One request on `conn`, read until its answer has come (the connection kept alive)."""
    conn.sendall(b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
    seen = b""
    while b'"/first"' not in seen:
        seen += conn.recv(65536)


@pytest.mark.parametrize("stray", [b"\r\n", b"\r\n\r\n\r\n", b"\n"])
def test_bytes_between_requests_that_begin_no_request_do_not_hold_the_connection(server, stray):
    """The parser skips line ends between requests without beginning one, and they cancelled the
    keep-alive timer armed at the answer: one `\\r\\n` held the connection (and a file descriptor)
    for ever."""
    with socket.create_connection(server, timeout=20) as conn:
        answered_first(conn)
        conn.sendall(stray)
        began = time.monotonic()
        rest = b""
        while chunk := conn.recv(65536):
            rest += chunk
        assert time.monotonic() - began < 5, "closed once no request came (HEAD_TIMEOUT_S, 1 s here)"
        assert rest == b"", "closed as an idle connection is: no answer a next request could take for its own"


def test_line_ends_sent_again_and_again_do_not_put_the_close_off(server):
    with socket.create_connection(server, timeout=20) as conn:
        answered_first(conn)
        began = time.monotonic()
        try:
            for _ in range(40):  # 4 s of a line end every 0.1 s
                conn.sendall(b"\r\n")
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            pass
        closed = False
        try:
            closed = conn.recv(65536) == b""
        except (ConnectionResetError, TimeoutError):
            closed = True
        assert closed and time.monotonic() - began < 5


def test_a_request_after_a_stray_line_end_has_its_own_heads_time(server):
    """The next request's head is timed from its own first byte, not from the line end before it."""
    with socket.create_connection(server, timeout=20) as conn:
        answered_first(conn)
        conn.sendall(b"\r\n")
        time.sleep(0.7)  # HEAD_TIMEOUT_S is 1 s here
        conn.sendall(b"GET /second HTTP/1.1\r\n")
        time.sleep(0.6)  # past a second since the line end, 0.6 s into this head
        conn.sendall(b"Host: x\r\nConnection: close\r\n\r\n")
        rest = b""
        while chunk := conn.recv(65536):
            rest += chunk
        assert status_of(rest) == 200 and b'"/second"' in rest, rest[:200]


def test_a_request_after_stray_line_ends_is_answered(server):
    first = b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n"
    last = b"GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    response = exchange(server, first, b"\r\n", last, pause=0.2)
    assert response.count(b"HTTP/1.1 200") == 2 and b'"/last"' in response, response[:300]
