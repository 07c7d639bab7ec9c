"""The API's HTTP/1.1 protocol: uvicorn's httptools one, with each request's head bounded in size
and in time.

httptools (llhttp) sets no limit on a request line or on headers, and uvicorn and httptools grow the
URL and a header value by concatenation, copying it each time: one client sending an endless URL
or header took a worker's memory and, copying, its CPU (a 32 MB URL: about 4 s of one core) while
every other request on that worker waited. And a connection that never finishes its head was held
for ever. Here:

- a head longer than MAX_HEAD_BYTES is answered 431 and its connection closed;
- a head not complete HEAD_TIMEOUT_S after its first byte (or after the connection opened, for a
  connection that sends nothing) is answered 408 and its connection closed.

Between requests of a kept-alive connection uvicorn's own keep-alive timeout applies.
"""

from __future__ import annotations

import asyncio
import json
import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("lambda.api")

# The request line and headers of one request. Counted are the bytes of each read that starts
# within an incomplete head; the read in which a request begins is not, so a head may exceed this by
# at most one read (the event loop reads up to 256 KiB): bounded all the same.
MAX_HEAD_BYTES = 64 * 1024
HEAD_TIMEOUT_S = 10.0

REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large"}


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the request head bounded (module docstring)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._head_bytes = 0
        self._in_head = True
        self._head_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._start_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0
        self._in_head = True
        self._start_head_timer()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._stop_head_timer()
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        if not self._in_head or self._head_bytes + len(data) <= MAX_HEAD_BYTES:
            if self._in_head:
                self._head_bytes += len(data)
            super().data_received(data)
            return
        # Let the parser see only what fits: a head that ends within it goes on as usual (a request
        # beginning after it, pipelined, starts its own count).
        room = MAX_HEAD_BYTES - self._head_bytes
        self._head_bytes = MAX_HEAD_BYTES
        super().data_received(data[:room])
        if self.transport.is_closing():
            return
        if self._in_head and self._head_bytes >= MAX_HEAD_BYTES:
            self._refuse(431, f"the request line and headers are longer than {MAX_HEAD_BYTES} bytes")
            return
        self.data_received(data[room:])

    def _start_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            self._refuse(408, f"the request line and headers did not arrive within {HEAD_TIMEOUT_S:g} s")

    def _refuse(self, status: int, detail: str) -> None:
        """Answer `status` with the API's error body and close the connection."""
        self._stop_head_timer()
        body = json.dumps({"detail": detail}).encode()
        head = [f"HTTP/1.1 {status} {REASONS[status]}\r\n".encode()]
        for name, value in self.server_state.default_headers:
            head.append(name + b": " + value + b"\r\n")
        head.append(b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body))
        self.transport.write(b"".join(head) + body)
        self.transport.close()
        log.info("refused a request head (%d): %s", status, detail)
