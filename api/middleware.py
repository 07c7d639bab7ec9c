"""The API's one middleware, plain ASGI: security headers on every answer, the latency histogram,
a Host header naming another host refused (400: a page whose name was pointed at this machine,
DNS rebinding, reads nothing), an Expect header asking for more than 100-continue refused (417), and HEAD answered as GET without the body (FastAPI's routes take GET only; monitors ask HEAD).
A `Range` of more than one part is ignored (the whole file is sent, as HTTP allows): Starlette
merges the parts in time that grows with their square, and thousands of one-byte parts in a 47 KB
header cost about 0.7 s of CPU per unauthenticated request for the dashboard's script.

(Starlette's `@app.middleware("http")` wraps every request in extra tasks and memory streams; at
hundreds of queries a second that was a large share of the API's CPU.)
"""

from __future__ import annotations

import time
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_response

# The dashboard (/ and /static/*) runs only its own files: no inline script or style, no other origin.
DASHBOARD_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


class HeadersAndLatency:
    """Adds `X-Content-Type-Options: nosniff` to every answer (and the CSP and no-cache to the
    dashboard's), and observes each request's latency by route, method and status."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str] | None = None) -> None:
        self.app = app
        self.hosts = hosts  # the names a Host header may give (ApiSettings.host_names); None: any

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        head = scope["method"] == "HEAD"
        if head:
            scope = {**scope, "method": "GET"}
        if any(name == b"range" and b"," in value for name, value in scope["headers"]):
            scope = {**scope, "headers": [(n, v) for n, v in scope["headers"] if n != b"range"]}
        path = scope["path"]
        dashboard = path == "/" or path.startswith("/static/")
        status = 500

        async def send_with_headers(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = MutableHeaders(scope=message)
                headers.setdefault("X-Content-Type-Options", "nosniff")
                if dashboard:
                    headers.setdefault("Content-Security-Policy", DASHBOARD_CSP)
                    headers.setdefault("Cache-Control", "no-cache")  # revalidate: page and script change together
            elif head and message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        if "\x00" in path:  # no route or file has one; the static files' lookup raised on it (a 500)
            await error_response(404, "no such path: it holds a NUL byte")(scope, receive, send_with_headers)
            _observe(scope, "unmatched", started, status)
            return
        hosts = [value for name, value in scope["headers"] if name == b"host"]
        if self.hosts is not None and any(host_name(value) not in self.hosts for value in hosts):
            detail = "the Host header names a host this API does not answer to (api.allowed_hosts)"
            await error_response(400, detail)(scope, receive, send_with_headers)
            _observe(scope, "unmatched", started, status)
            return
        if self.hosts is not None and not hosts and scope.get("http_version") != "1.0":
            # HTTP/1.1 requires it (RFC 9112); without one, no host was checked at all
            await error_response(400, "a Host header is required (HTTP/1.1)")(scope, receive, send_with_headers)
            _observe(scope, "unmatched", started, status)
            return
        if any(name == b"expect" and not _continue_only(value) for name, value in scope["headers"]):
            detail = "the Expect header asks for what this API does not do: only 100-continue"
            await error_response(417, detail)(scope, receive, send_with_headers)  # RFC 9110 §10.1.1
            _observe(scope, "unmatched", started, status)
            return
        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            route: Any = scope.get("route")
            _observe(scope, getattr(route, "path", "unmatched"), started, status)


# The methods the API serves keep their name in the latency metric; any other is "other", so a client
# cannot add series for each method the HTTP parser accepts.
SERVED_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"})


def _observe(scope: Scope, route: str, started: float, status: int) -> None:
    metrics = getattr(scope["app"].state, "metrics", None)
    if metrics is not None:
        method = scope["method"] if scope["method"] in SERVED_METHODS else "other"
        metrics.latency.labels(route, method, str(status)).observe(time.perf_counter() - started)


def _continue_only(value: bytes) -> bool:
    """Whether an Expect header asks for 100-continue alone (uvicorn answers that one)."""
    return all(part.strip().lower() == b"100-continue" for part in value.split(b","))


def host_name(value: bytes) -> str:
    """The host a Host header names, without its port (an IPv6 address without its brackets), in
    lower case."""
    text = value.decode("latin-1").strip().lower()
    if text.startswith("["):
        end = text.find("]")
        return text[1:end] if end > 0 else text
    return text.rsplit(":", 1)[0] if text.count(":") == 1 else text
