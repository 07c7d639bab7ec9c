"""A query never waits forever for a pooled HBase connection: when every connection is taken it
waits `api.hbase_pool_wait_s`, then HBase counts as unavailable (a 503 naming it)."""

from __future__ import annotations

import socket
import time

import pytest

from definitions.service_settings import ApiSettings
from definitions.settings import HBaseSettings, Settings
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
    pool = serving.batch.reader._connections()
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


class Table:
    def __init__(self, rows, scans):
        self.rows, self.scans = rows, scans

    def scan(self, **_):
        self.scans.append(1)
        return iter(self.rows)


class Pool:
    """happybase's pool as the reader uses it, over `rows` (the reader's decoding only)."""

    def __init__(self, rows):
        self.rows, self.scans = rows, []

    def connection(self, timeout):
        from contextlib import nullcontext

        conn = type("Conn", (), {"table": lambda _self, _name: Table(self.rows, self.scans)})()
        return nullcontext(conn)


@pytest.mark.parametrize(
    "rows",
    [
        [(b"\x00\x02/a" + b"h" + (0).to_bytes(8, "big"), {b"d:v": b"\x01"})],  # a value of one byte
        [(b"\x00\x02/a" + b"h" + (0).to_bytes(8, "big"), {b"d:s": b"sketch"})],  # no value
        [(b"\x00", {b"d:v": (1).to_bytes(8, "big")})],  # a row key too short for its bucket
    ],
)
def test_a_cell_the_batch_layer_cannot_have_written_is_unavailable_at_once(rows):
    """Reading it again cannot help: the whole scan was repeated, and with several Thrift servers
    the connection pool was thrown away on a decode error."""
    from definitions.views import PAGE_VIEWS
    from stores.batch_reader import BatchViewReader, BatchViewsUnavailable

    reader = BatchViewReader(Settings(), pool_size=1, wait_s=1)
    pool = reader._pool = Pool(rows)
    with pytest.raises(BatchViewsUnavailable):
        reader.series("page_views_v1", PAGE_VIEWS, "hour", ["/a"], 0, 10)
    assert len(pool.scans) == 1 and reader._pool is pool


def test_a_key_part_longer_than_its_key_is_no_key():
    from stores.batch_layout import decode_key, encode_key

    assert decode_key(encode_key(["/a", "b"])) == ("/a", "b")
    with pytest.raises(ValueError, match="runs past"):
        decode_key(b"\x00\x09/a")
