"""Whether a port is taken, for any host the settings accept: an IPv6 host made `up` fail with a bare
socket.gaierror before it started anything."""

from __future__ import annotations

import os
import socket

import pytest

from infra.process import port_owner


@pytest.mark.parametrize("family, host", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_a_listening_port_is_taken_and_named_by_its_process(family, host):
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        sock.listen()
        port = sock.getsockname()[1]
        for spelled in (host, f"[{host}]" if ":" in host else host):
            owner = port_owner(spelled, port)
            assert owner is not None and str(os.getpid()) in owner, owner
    assert port_owner(host, port) is None


@pytest.mark.parametrize("host", ["::1", "[::1]", "no-such-host.invalid"])
def test_a_free_port_or_an_unknown_host_is_no_owner_not_an_error(host):
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
        sock.bind(("::1", 0))
        port = sock.getsockname()[1]  # bound, not listening: nothing answers on it
    assert port_owner(host, port) is None
