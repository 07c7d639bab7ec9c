"""The running API (uvicorn, its worker processes) bounds each request's head: an endless URL is
answered 414 at once and its connection closed, and the API goes on answering."""

from __future__ import annotations

import socket
import time

import httpx

from api.http_protocol import MAX_HEAD_BYTES, MAX_URL_BYTES


def test_the_running_api_refuses_an_endless_url_and_goes_on_answering(settings, stack):
    address = (settings.api.host, settings.api.port)
    started = time.monotonic()
    with socket.create_connection(address, timeout=10) as conn:
        try:
            conn.sendall(b"GET /api/v1/views?x=" + b"a" * (64 * MAX_HEAD_BYTES))
        except (BrokenPipeError, ConnectionResetError):
            pass
        response = b""
        try:
            while chunk := conn.recv(65536):
                response += chunk
        except ConnectionResetError:
            pass
    assert response.startswith(b"HTTP/1.1 414 "), response[:200]
    assert f"(its path and query) is longer than {MAX_URL_BYTES} bytes".encode() in response
    assert time.monotonic() - started < 10
    answer = httpx.get(f"http://{settings.api.host}:{settings.api.port}/api/v1/views", timeout=10)
    assert answer.status_code == 200


def test_the_running_api_answers_no_host_it_does_not_serve(settings, stack):
    """A page whose name was pointed at this machine (DNS rebinding) is refused by the running
    workers (new connections, which the kernel spreads over them: the check is in the one app
    every worker serves, tests/unit/api/test_api_surface.py); the platform's own address is answered."""
    base = f"http://{settings.api.host}:{settings.api.port}"
    for _ in range(4 * settings.api.workers):  # a new connection each
        refused = httpx.get(f"{base}/api/v1/views", headers={"Host": f"rebound.example:{settings.api.port}"})
        assert refused.status_code == 400 and "api.allowed_hosts" in refused.json()["detail"]
        assert httpx.get(f"{base}/api/v1/views", timeout=10).status_code == 200
