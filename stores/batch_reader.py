"""Reading batch views and the pointer from HBase for queries: pooled Thrift connections, reused
across requests, with the row and column layout of stores/batch_layout.

The serving layer's one way to read HBase. A read that fails is tried once more on another pooled
connection (a connection broken by a dropped table is replaced by the pool), then raises
`BatchViewsUnavailable`, whose text is safe to show and whose `detail` is for the log.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from definitions.settings import Settings
from definitions.views import MAX_SKETCH_BYTES, View, key_text  # a larger sketch is none the platform wrote
from stores import batch_layout as layout
from stores.adapters import ROW_BYTES, ReadTooLarge, text_bytes
from stores.clients import closed_after

log = logging.getLogger(__name__)

T = TypeVar("T")


class BatchViewsUnavailable(RuntimeError):
    """HBase cannot be read. `detail` carries the driver's message (hosts, Java exceptions)."""

    def __init__(self, detail: str) -> None:
        super().__init__("hbase cannot be read")
        self.detail = detail


def non_negative(value: int) -> int:
    """A cell's value; ValueError when negative: every number field of the event contract is
    non-negative, so no count, sum or distinct count is (a negative one is damage, not data)."""
    if value < 0:
        raise ValueError(f"a negative value {value}: no cell is negative")
    return value


class BadBatchCell(ValueError):
    """A batch view's cell or row key the batch layer cannot have written (a value of the wrong
    length, a row key that does not parse): reading it again, or from another server, cannot help."""


# What decoding a stored cell or row key raises when its bytes are wrong.
DECODE_ERRORS = (struct.error, ValueError, KeyError, IndexError, StopIteration, UnicodeDecodeError)
# A top read may go through this many times api.max_read_mib of cells (keys seen again are summed,
# not held) before it is refused: bounds its time as the held keys bound its memory.
READ_FACTOR = 4
SKETCH_ROWS_A_FETCH = 200  # a distinct view's rows are fetched a few at a time: each holds a sketch
ROWS_A_FETCH = 1_000
TOP_RESULTS_A_FETCH = 10  # a top read's results (parts of a bucket's row) a round trip …
TOP_COLUMNS_A_RESULT = 1_000  # … and columns (keys) a result, at most
CELL_BYTES = 64  # a cell's family, qualifier prefix, 8-byte value, its share of the row key, Thrift framing


def round_trip_bytes(settings: Settings) -> int:
    """What one scanner round trip of the API may bring, at most: all the API's connections
    (`api.workers` × `api.hbase_pool_size`) mid-way at once hold a quarter of the Thrift server's
    heap (`hbase.thrift_heap_mb`), which builds each round trip's results whole before it answers."""
    connections = settings.api.workers * settings.api.hbase_pool_size
    return max(64 * 1024, settings.hbase.thrift_heap_mb * 2**20 // (4 * connections))


def series_rows_a_fetch(settings: Settings, view: View) -> int:
    """Rows a series scan asks for a round trip: within round_trip_bytes of rows whose key is the
    longest the `events.*` limits allow, each with the largest sketch a distinct view holds."""
    most = SKETCH_ROWS_A_FETCH if view.aggregation == "distinct" else ROWS_A_FETCH
    row = settings.events.worst_key_bytes() + CELL_BYTES + (MAX_SKETCH_BYTES if view.aggregation == "distinct" else 0)
    return max(1, min(most, round_trip_bytes(settings) // row))


def top_scan_sizes(settings: Settings) -> tuple[int, int]:
    """(results a round trip, columns a result) of a top read's scan over a row per bucket and a
    column per key: within round_trip_bytes of columns whose key is the longest the `events.*`
    limits allow; fewer columns a result first, so buckets of few keys still come several at once."""
    column = settings.events.worst_key_bytes() + CELL_BYTES
    columns = max(1, min(TOP_COLUMNS_A_RESULT, round_trip_bytes(settings) // (TOP_RESULTS_A_FETCH * column)))
    return max(1, min(TOP_RESULTS_A_FETCH, round_trip_bytes(settings) // (columns * column))), columns


class BatchViewReader:
    """Pooled reads of the pointer's row and of batch-view cells."""

    def __init__(self, settings: Settings, pool_size: int, wait_s: float, attempts: int = 2) -> None:
        self.settings = settings
        self.pool_size = pool_size
        self.wait_s = wait_s
        self.attempts = attempts
        self._pool = None
        self._lock = threading.Lock()

    def _connections(self):
        from stores.clients import hbase_pool

        with self._lock:
            if self._pool is None:
                self._pool = hbase_pool(self.settings, self.pool_size, timeout_s=5)
            return self._pool

    def _read(self, read: Callable[[Any], T]) -> T:
        for attempt in range(1, self.attempts + 1):
            try:
                with self._connections().connection(timeout=self.wait_s) as conn:
                    return read(conn)
            except ReadTooLarge:
                raise  # the query asks too much: the same read again would too
            except BadBatchCell as exc:  # the store's content: not retried, the server not forgotten
                log.warning("a batch view's cell cannot be read: %s", exc)
                raise BatchViewsUnavailable(str(exc)) from exc
            except Exception as exc:
                if attempt == self.attempts:
                    log.warning("hbase read failed: %s: %s", type(exc).__name__, exc)
                    self._forget_server(exc)
                    raise BatchViewsUnavailable(f"{type(exc).__name__}: {exc}") from exc
        raise AssertionError("not reached")

    def _forget_server(self, exc: Exception) -> None:
        """After a failed read, the next one picks the Thrift server again (failover across
        `hbase.thrift_hosts`); a pool that only had no free connection is kept."""
        import happybase

        if len(self.settings.hbase.thrift_endpoints) > 1 and not isinstance(exc, happybase.NoConnectionsAvailable):
            with self._lock:
                self._pool = None

    def pointer_columns(self) -> dict[bytes, bytes]:
        """The pointer row's columns (empty before the first batch run)."""
        return self._read(lambda conn: conn.table(self.settings.hbase.meta_table).row(layout.POINTER_ROW))

    def series(
        self, table: str, view: View, granularity: str, keys: Sequence[str], first: int, last: int
    ) -> dict[int, tuple[int, bytes | None]]:
        """{event bucket: (value, sketch or None)} of one key's cells in buckets [first, last]."""
        start, stop = layout.scan_range(view, granularity, keys, first, last + 1)
        budget = self.settings.api.max_read_mib * 2**20
        rows_a_fetch = series_rows_a_fetch(self.settings, view)

        def read(conn) -> dict[int, tuple[int, bytes | None]]:
            out = {}
            held = 0
            scan = conn.table(table).scan(row_start=start, row_stop=stop, batch_size=rows_a_fetch)
            with closed_after(scan):  # closed before the connection goes back (see totals)
                for row, data in scan:
                    sketch = data.get(layout.SKETCH)
                    if sketch is not None and len(sketch) > MAX_SKETCH_BYTES:
                        raise BadBatchCell(f"{table}: row {row[:80]!r}: a sketch of {len(sketch)} bytes: no sketch is")
                    held += ROW_BYTES + len(row) + (len(sketch) if sketch is not None else 0)
                    if held > budget:
                        raise ReadTooLarge(
                            f"{view.name}: the window holds more than {self.settings.api.max_read_mib} MiB of batch "
                            "cells (api.max_read_mib); ask for a narrower window or a coarser granularity"
                        )
                    try:
                        _, _, bucket = layout.parse_row_key(view, row)
                        out[bucket] = (non_negative(layout.decode_int(data[layout.VALUE])), sketch)
                    except DECODE_ERRORS as exc:
                        raise BadBatchCell(f"{table}: row {row[:80]!r}: {type(exc).__name__}: {exc}"[:300]) from None
            return out

        return self._read(read)

    def totals(self, table: str, view: View, granularity: str, first: int, last: int) -> dict[str, int]:
        """{key text: sum over buckets [first, last]} of a by-bucket view (top pages)."""
        start, stop = layout.scan_range(view, granularity, (), first, last + 1)
        budget = self.settings.api.max_read_mib * 2**20

        def read(conn) -> dict[str, int]:
            # A row per bucket, a column per key it saw: parts of rows, never a whole wide one at once.
            results, columns = top_scan_sizes(self.settings)
            scan = conn.table(table).scan(row_start=start, row_stop=stop, batch_size=results, scan_batching=columns)
            # Closed here when a read stops part-way (a refusal, a cell that is none): left to the
            # exception's end, its scanner closed on the connection after the pool gave it to another.
            with closed_after(scan):
                return _sum(scan)

        def _sum(scan) -> dict[str, int]:
            totals: dict[str, int] = {}
            held = read = 0
            for _, data in scan:
                for column, value in data.items():
                    read += len(column) + len(value)
                    if read > READ_FACTOR * budget:
                        raise ReadTooLarge(
                            f"{view.name}: the window holds more than {READ_FACTOR * self.settings.api.max_read_mib} "
                            "MiB of batch cells (api.max_read_mib); ask for a narrower window or a coarser granularity"
                        )
                    try:
                        key = key_text(layout.decode_key(column[2:]))
                        counted = non_negative(layout.decode_int(value))
                    except DECODE_ERRORS as exc:
                        raise BadBatchCell(
                            f"{table}: column {column[:80]!r}: {type(exc).__name__}: {exc}"[:300]
                        ) from None
                    if key not in totals:
                        held += ROW_BYTES + 2 * text_bytes(key)
                        if held > budget:
                            raise ReadTooLarge(
                                f"{view.name}: the window holds more than {self.settings.api.max_read_mib} MiB "
                                "of batch keys (api.max_read_mib); ask for a narrower window"
                            )
                    totals[key] = totals.get(key, 0) + counted
            return totals

        return self._read(read)
