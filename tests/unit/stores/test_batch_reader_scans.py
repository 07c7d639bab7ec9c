"""A batch read that stops part-way (a top-N refused for its size, a cell that is none) closes its
HBase scanner before its connection goes back to the pool: left to the exception's end, the
scanner was closed on the connection while another request used it (no service: the pool and the
table are stand-ins that record the order)."""

from __future__ import annotations

import contextlib

import pytest

from definitions.settings import Settings
from definitions.views import TOP_PAGES
from stores import batch_layout as layout
from stores.adapters import ReadTooLarge
from stores.batch_reader import BatchViewReader


def test_a_refused_read_closes_its_scanner_before_the_connection_is_returned():
    events: list[str] = []

    def scan(**kwargs):
        try:
            for n in range(100_000):
                yield b"row", {layout.column(TOP_PAGES, [f"/{n:06d}" + "x" * 500]): layout.encode_int(1)}
        finally:
            events.append("scanner closed")

    class Pool:
        @contextlib.contextmanager
        def connection(self, timeout):
            try:
                yield type("Conn", (), {"table": lambda self, name: type("T", (), {"scan": staticmethod(scan)})()})()
            finally:
                events.append("connection returned")

    reader = BatchViewReader(Settings(api={"max_read_mib": 1}), pool_size=1, wait_s=1)
    reader._pool = Pool()
    with pytest.raises(ReadTooLarge, match="top_pages"):
        reader.totals("t", TOP_PAGES, "hour", 0, 1)
    assert events == ["scanner closed", "connection returned"]
