"""The API's HTTP/1.1 protocol: uvicorn's httptools one, with each request's head bounded in size
and in time.

httptools (llhttp) sets no limit on a request line or on headers, and uvicorn and httptools grow the
URL and a header value by concatenation, copying it each time: one client sending an endless URL
or header took a worker's memory and, copying, its CPU (a 32 MB URL: about 4 s of one core) while
every other request on that worker waited. And a connection that never finishes its head was held
for ever. Here:

- a head (or a chunked body's trailers) longer than MAX_HEAD_BYTES is answered 431 and its
  connection closed; a request target longer than httptools' URL parser reads (MAX_URL_BYTES) 414;
- a head not complete HEAD_TIMEOUT_S after its first byte (or after the connection opened, for a
  connection that sends nothing) is answered 408 and its connection closed. A pipelined head
  waiting behind the answer to an earlier request has its time from that answer's end, and any
  refusal is written after the earlier answers.

And a request's body:

- a body not complete BODY_TIMEOUT_S after its head is answered 408 (or, its answer begun, the
  connection closed): one that stops arriving held the request, and the app reading it, for ever;
- that timer keeps running after an answer given before the body arrived (the app did not read it,
  as GET routes do not, or refused it: 401, 413): uvicorn reads and drops the rest, so the client
  gets its answer, and the connection is closed when the rest does not come. (uvicorn arms its
  keep-alive timer at the answer, and the next byte of the unread body cancelled it: nothing closed
  the connection any more.) Once such a body has all arrived, the keep-alive timer runs again.
- a request waiting behind an earlier one's answer (pipelined: nothing is read meanwhile) has its
  body's time from when it is its turn.

And pipelining: at most MAX_PIPELINED requests of one connection wait behind the answer being
written (reading pauses while they wait, though a route reading its body resumes it: the count is
the bound); the next is answered 429 in its turn and the connection closed (the connection is read a little longer, its bytes dropped, so that the client can read
the answers: closed while it sends, the kernel resets it). uvicorn parsed every request of each read (the event loop reads up to 256 KiB: ~9,000 tiny
ones) and read on after each answer: one connection's waiting requests grew without end.

And an answer: a client that does not take 48 KiB of it within SEND_STALL_S (writing is paused
while more than 64 KiB wait to be sent, and resumes below 16 KiB) has its connection dropped. A
client reading nothing held the answer's coroutine, its open file and the connection for as long as
it liked (uvicorn waits for the buffers to drain without a deadline); one reading at 2 KB/s or
more is not affected.

Between requests of a kept-alive connection uvicorn's own keep-alive timeout applies; bytes there
that begin no request (line ends, which the parser skips) close the connection HEAD_TIMEOUT_S after
the first of them, or past MAX_HEAD_BYTES of them.
"""

from __future__ import annotations

import asyncio
import json
import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from definitions.logs import REPEATS

log = logging.getLogger("lambda.api")

# The request line and headers of one request. Counted are the bytes of each read that starts
# within an incomplete head; the read in which a request begins is not, so a head may exceed this by
# at most one read (the event loop reads up to 256 KiB): bounded all the same.
MAX_HEAD_BYTES = 64 * 1024
# The request target: httptools' URL parser reads at most this many bytes (its offsets are 16-bit),
# and refused a longer one as no valid request.
MAX_URL_BYTES = 65_535
HEAD_TIMEOUT_S = 10.0
# Requests of one connection parsed and waiting behind the answer being written (HTTP pipelining).
MAX_PIPELINED = 32
# The body of one request, from the end of its head: 4 MiB (api.max_body_bytes) at 1 Mbit/s is 34 s.
BODY_TIMEOUT_S = 60.0
# How long an answer may wait for a client that reads nothing of it.
SEND_STALL_S = 30.0
# After a refusal: how long, and for how many more bytes, the connection is read (and what comes
# dropped) before it is closed.
LINGER_S = 2.0
LINGER_BYTES = 1 << 20

REASONS = {
    400: "Bad Request",
    408: "Request Timeout",
    414: "URI Too Long",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
}


class PipelineFull(Exception):
    """Raised in the parser's callback to stop it at a request pipelined beyond MAX_PIPELINED."""


class UrlTooLong(Exception):
    """Raised in the parser's callback to stop it at a request target longer than MAX_URL_BYTES."""


class _ParserLog(logging.LoggerAdapter):
    """uvicorn's logger for a connection, less its WARNING for each request the parser refuses:
    send_400_response answers it and logs it at INFO, as often as REPEATS lets through (one line
    per request a client sends was a flood of warnings anyone could cause)."""

    @property
    def level(self) -> int:  # uvicorn reads it to decide whether to log at TRACE
        return self.logger.level

    def log(self, level, msg, *args, **kwargs):
        if msg != "Invalid HTTP request received.":
            super().log(level, msg, *args, **kwargs)


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the request head bounded (module docstring).

    `_bounded`: the bytes read now belong to a head or to a chunked body's trailers (which the
    parser gathers as it gathers headers), and count against MAX_HEAD_BYTES. `_in_head`: a
    request's head is incomplete; its timer runs only while no earlier request of the connection
    is still being answered (uvicorn reads no further meanwhile)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._head_bytes = 0
        self._bounded = self._in_head = True
        self._between = False  # a request ended, and no other began since
        self._stray_at: float | None = None  # when bytes that began no request first came since it ended
        self._stray_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        self._refusal: tuple[int, str] | None = None  # decided while an earlier answer is written
        self._overflow = False  # a request came with MAX_PIPELINED others waiting
        self._url_too_long = False
        self._lingered: int | None = None  # bytes dropped since a refusal was written
        self._linger_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        if not isinstance(self.logger, _ParserLog):
            self.logger = _ParserLog(self.logger, {})  # type: ignore[assignment]
        self._start_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        self._stop_body_timer()
        self._stop_send_timer()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_timer is None:
            self._send_timer = self.loop.call_later(SEND_STALL_S, self._send_stalled)

    def resume_writing(self) -> None:
        self._stop_send_timer()
        super().resume_writing()

    def _stop_send_timer(self) -> None:
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _send_stalled(self) -> None:
        # Also when the connection is closing: close() waits for the buffer the client does not read.
        self._send_timer = None
        log.info("dropped a connection: its client read nothing of the answer for %g s", SEND_STALL_S, extra=REPEATS)
        self.transport.abort()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0
        self._bounded = self._in_head = True
        self._between = False
        self._stray_at, self._stray_bytes = None, 0
        if not self._answering():
            self._start_head_timer()

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > MAX_URL_BYTES:
            self._url_too_long = True  # raised, the parser stops at once (send_400_response)
            raise UrlTooLong

    def on_headers_complete(self) -> None:
        self._bounded = self._in_head = False
        self._stop_head_timer()
        if len(self.pipeline) >= MAX_PIPELINED:
            # Raised, the parser stops at once: nothing after this head is parsed (send_400_response).
            self._overflow = True
            raise PipelineFull
        super().on_headers_complete()
        self._stop_body_timer()
        self._body_timer = self.loop.call_later(BODY_TIMEOUT_S, self._body_timed_out)

    def on_chunk_header(self) -> None:
        # After the last chunk's size line come the trailers, if any: bounded like a head.
        self._head_bytes = 0
        self._bounded = True

    def on_body(self, body: bytes) -> None:
        self._bounded = False
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._bounded = False
        self._between = True
        self._stop_body_timer()
        super().on_message_complete()
        if (
            self.cycle is not None
            and self.cycle.response_complete  # answered before this body ended: its bytes cancelled
            and not self.pipeline  # uvicorn's keep-alive timer, which is armed again here
            and self.timeout_keep_alive_task is None
            and not self.transport.is_closing()
        ):
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.pipeline and not self.transport.is_closing():
            self.flow.pause_reading()  # uvicorn reads on while requests wait: one read is ~9,000 more
        if self.transport.is_closing() or self._answering():
            return
        if self._refusal is not None:
            self._refuse(*self._refusal)
        elif self._in_head:  # a head that waited behind the answers: its time starts now
            self._start_head_timer()

    def data_received(self, data: bytes) -> None:
        if self._lingered is not None:  # refused, and the refusal written: what comes is dropped
            self._lingered += len(data)
            if self._lingered > LINGER_BYTES:
                self.transport.close()
            return
        if self._refusal is not None:
            return  # refused: nothing more is read
        if not self._bounded or self._head_bytes + len(data) <= MAX_HEAD_BYTES:
            if self._bounded:
                self._head_bytes += len(data)
            super().data_received(data)
            self._began_nothing(len(data))
            return
        # Let the parser see only what fits: a head that ends within it goes on as usual (a request
        # beginning after it, pipelined, starts its own count).
        room = MAX_HEAD_BYTES - self._head_bytes
        self._head_bytes = MAX_HEAD_BYTES
        if room:  # no bytes fed to the parser are the end of the stream to it: a 400, not this 431
            super().data_received(data[:room])
        if self._ended():  # the parser refused what it read (answered 400, or to be)
            return
        if self._bounded and self._head_bytes >= MAX_HEAD_BYTES:
            if self._in_head:
                self._refuse(431, f"the request line and headers are longer than {MAX_HEAD_BYTES} bytes")
            else:  # the trailers of the request being answered: it is refused now
                self._refuse_current(431, f"the request's trailers are longer than {MAX_HEAD_BYTES} bytes")
            return
        self.data_received(data[room:])

    def _began_nothing(self, read: int) -> None:
        """After a request was answered, bytes that began no other (line ends, which the parser skips
        between requests) cancelled uvicorn's keep-alive timer: one `\r\n` held the connection for
        ever. The keep-alive timer runs again, to HEAD_TIMEOUT_S after the first such byte (more of
        them do not put it off), and more than MAX_HEAD_BYTES of them close the connection. A request
        that begins meanwhile has its own head's time."""
        if (
            self._between
            and not self._in_head
            and not self._answering()
            and self.timeout_keep_alive_task is None
            and not self.transport.is_closing()
        ):
            now = self.loop.time()
            if self._stray_at is None:
                self._stray_at = now
            self._stray_bytes += read
            if self._stray_bytes > MAX_HEAD_BYTES:
                self.transport.close()
                return
            self.timeout_keep_alive_task = self.loop.call_later(
                max(0.0, self._stray_at + HEAD_TIMEOUT_S - now), self.timeout_keep_alive_handler
            )

    def _answering(self) -> bool:
        """Whether a request of this connection is still being answered (or waits to be)."""
        return bool(self.pipeline) or (self.cycle is not None and not self.cycle.response_complete)

    def _start_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _stop_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if self.transport.is_closing() or self.cycle is None or not self.cycle.more_body:
            return
        if self.pipeline:  # it waits behind an earlier answer, nothing is read meanwhile: its time is not up
            self._body_timer = self.loop.call_later(BODY_TIMEOUT_S, self._body_timed_out)
            return
        self._refuse_current(408, f"the request body did not arrive within {BODY_TIMEOUT_S:g} s")

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            self._refuse(408, f"the request line and headers did not arrive within {HEAD_TIMEOUT_S:g} s")

    def _refuse(self, status: int, detail: str) -> None:
        """Answer `status` with the API's error body and close the connection; after the answers
        to earlier requests, if one is still being written (meanwhile nothing more is read)."""
        self._stop_head_timer()
        if self.transport.is_closing() or self._lingered is not None:
            return  # refused already
        if self._answering():
            self._refusal = (status, detail)
            self.flow.pause_reading()
            return
        self._write_refusal(status, detail)

    def _refuse_current(self, status: int, detail: str) -> None:
        """Refuse the request being answered: `status` unless its answer has begun, then close."""
        self._stop_head_timer()
        self._stop_body_timer()
        self._refusal = (status, detail)  # nothing more is read
        started = self.cycle is not None and self.cycle.response_started
        if self.cycle is not None:  # the app's receive() says the client left, its send() is dropped
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        if started:
            self.transport.close()
            log.info("closed a connection (%d): %s", status, detail, extra=REPEATS)
        else:
            self._write_refusal(status, detail)

    def send_400_response(self, msg: str) -> None:
        """A request the parser refuses (two Content-Lengths, a header name with a space, a bad
        method): the API's error body, not uvicorn's text/plain. Or a request pipelined beyond
        MAX_PIPELINED: refused in its turn."""
        if self._overflow:
            self._refuse(429, f"more than {MAX_PIPELINED} requests pipelined on one connection wait to be answered")
            return
        if self._url_too_long:
            self._refuse(414, f"the request's target (its path and query) is longer than {MAX_URL_BYTES} bytes")
            return
        detail = "not a valid HTTP/1.1 request: its request line, headers or framing cannot be read"
        if not self._in_head and not self._between and not self.pipeline:
            # In the body of the request being answered (a bad chunk): the app waits for the rest of
            # it, which never comes. Deferred behind its own answer, it was answered 408 a minute on.
            self._refuse_current(400, detail)
            return
        self._refuse(400, detail)

    def _ended(self) -> bool:
        """Closed, refused (its refusal written, or waiting for earlier answers): nothing more is read."""
        return self.transport.is_closing() or self._lingered is not None or self._refusal is not None

    def _write_refusal(self, status: int, detail: str) -> None:
        if self.transport.is_closing() or self._lingered is not None:
            return  # refused already (a timer that fired since): nothing may follow its end
        self._stop_head_timer()
        self._stop_body_timer()
        body = json.dumps({"detail": detail}).encode()
        head = [f"HTTP/1.1 {status} {REASONS[status]}\r\n".encode()]
        for name, value in self.server_state.default_headers:
            head.append(name + b": " + value + b"\r\n")
        head.append(b"content-type: application/json\r\nx-content-type-options: nosniff\r\n")
        head.append(b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body))
        self.transport.write(b"".join(head) + body)
        self._close_lingering()
        log.info("refused a request head (%d): %s", status, detail, extra=REPEATS)

    def _close_lingering(self) -> None:
        """Close after the refusal written, once the client has had LINGER_S to read it. Closed at
        once while the client still sends (pipelined requests, a body), the kernel answered with a
        reset, and the client lost the refusal and any answer before it that it had not read yet.
        The end of the answers is sent now (the client sees the connection end); what arrives
        meanwhile is dropped, and past LINGER_BYTES of it the connection closes."""
        if not self.transport.can_write_eof() or self.pipeline:
            # TLS: no half-close. Or an earlier answer still to come (the refused request waited
            # behind it): its writes after the end would fail; closed, they are dropped.
            self.transport.close()
            return
        self.transport.write_eof()
        self._lingered = 0
        self._linger_timer = self.loop.call_later(LINGER_S, self.transport.close)
        self.flow.resume_reading()
