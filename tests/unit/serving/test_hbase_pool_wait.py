"""A query never waits forever for a pooled HBase connection: when every connection is taken it
waits `api.hbase_pool_wait_s`, then HBase counts as unavailable (a 503 naming it)."""

from __future__ import annotations

import socket
import time

import pytest

from definitions.settings import ApiSettings, HBaseSettings, Settings
from serving_layer.service import ServingLayer, StoreUnavailable


def test_an_exhausted_pool_is_unavailable_after_the_wait():
    # happybase's pool opens one TCP connection when made: a bare loopback listener is enough here,
    # since no request reaches it (every connection is taken).
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    settings = Settings(
        hbase=HBaseSettings(thrift_port=port), api=ApiSettings(hbase_pool_size=1, hbase_pool_wait_s=0.3)
    )
    serving = ServingLayer(settings)
    pool = serving.batch_views._connections()
    taken = pool._acquire_connection()  # the only connection, held by "another request" (no server needed)
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as err:
            serving.pointer()
        waited = time.monotonic() - started
    finally:
        pool._return_connection(taken)
        listener.close()
    assert err.value.component == "hbase"
    assert 0.5 <= waited < 5, f"two attempts of 0.3 s each, not forever: {waited:.2f}s"
