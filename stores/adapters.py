"""What a store adapter must provide for its role: one `typing.Protocol` per role of the `stores`
settings (definitions/store_settings.py), listing the methods the platform calls. mypy checks the
callers against these protocols, and the built-in adapters against them (the block at the end).

A third-party adapter is a class whose constructor takes the arguments stores.registry passes for
its role and whose instances have these methods; it need not inherit from anything. It may raise
what the built-in adapter of its role raises (see each protocol) so the callers' handling applies.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from definitions.store_settings import Role
    from definitions.views import View
    from stores.pointer import Pointer
    from stores.realtime import RealtimeCell, RealtimeRow


class BatchViewReaderAdapter(Protocol):
    """Setting `stores.batch_views`; built as `cls(settings, pool_size, wait_s)` by the serving layer,
    once, and shared by every request (so it must be thread-safe). A read that fails raises
    stores.batch_reader.BatchViewsUnavailable: the query is then answered 503 naming the batch store."""

    def pointer_columns(self) -> dict[bytes, bytes]:
        """The pointer's columns as stores.pointer.Pointer.from_columns reads them; {} before the
        first batch run."""
        ...

    def series(
        self, table: str, view: View, granularity: str, keys: Sequence[str], first: int, last: int
    ) -> dict[int, tuple[int, bytes | None]]:
        """{event bucket: (value, HLL sketch or None)} of one key's cells of `table` in buckets [first, last]."""
        ...

    def totals(self, table: str, view: View, granularity: str, first: int, last: int) -> dict[str, int]:
        """{key text: value summed over buckets [first, last]} of a by-bucket view's `table`."""
        ...


class RetentionIncomplete(RuntimeError):
    """A retention pass (VersionStoreAdapter.retain) that failed after it dropped tables: `dropped`
    names them, so what was done is still said."""

    def __init__(self, message: str, dropped: Sequence[str]) -> None:
        super().__init__(message)
        self.dropped = list(dropped)


class ReadTooLarge(ValueError):
    """A query would hold more data than `api.max_read_mib` allows (realtime rows, or a top-N's batch
    keys): the API answers 422 with the message, which names the view and asks for a narrower window."""


# What a row (or a key) read holds in Python beyond its key (held twice: as read, and as merged) and
# sketch, counted against api.max_read_mib (measured: ~96 MiB for 400k rows of 20-byte keys).
ROW_BYTES = 200
_EMPTY_TEXT = sys.getsizeof("")


def text_bytes(text: str) -> int:
    """What a string's characters take in Python: 1, 2 or 4 bytes each, by its widest character (a
    key of emoji takes four times its length), and for one beyond ASCII its larger header (~30 bytes)."""
    return sys.getsizeof(text) - _EMPTY_TEXT


class RealtimeReaderAdapter(Protocol):
    """Setting `stores.realtime_reader`; built as `cls(settings, timeout_s=...)` by the serving layer
    when first needed. Any exception from a read makes the serving layer close it and build a new one,
    then (on a second failure) answer 503 naming the realtime store; except ReadTooLarge, raised when
    a read would hold more than `api.max_read_mib`: the query is refused, the reader kept.

    Optional: `generation() -> Hashable`, a value that changes whenever the store's rows may have
    changed (the built-in reader returns stores.realtime_writes' marks). A reader that has it lets
    the serving layer keep the speed part of answers until it changes; its writer (and every other
    process that writes or deletes rows) must then change it after each write, as
    stores.realtime.RealtimeWriter does. A reader without it is read at every query."""

    def series(
        self,
        view: str,
        granularity: str,
        key: str,
        buckets: Sequence[int],
        min_ingest_bucket: int,
        with_sketches: bool = False,
        skip_ingest: tuple[int, int] | None = None,
    ) -> dict[int, RealtimeCell]:
        """Per event bucket of `buckets`, the key's values summed over ingest buckets >= `min_ingest_bucket`
        (and their sketches when `with_sketches`); buckets without rows are left out. `skip_ingest`
        (low, high): rows of ingest buckets in [low, high) are left out too; asked only while a
        replay's rows answer for those buckets (stores.replays). `lambdactl replay` refuses a
        reader whose `series` or `bucket` does not take it."""
        ...

    def bucket(
        self,
        view: str,
        granularity: str,
        buckets: Sequence[int],
        min_ingest_bucket: int,
        skip_ingest: tuple[int, int] | None = None,
    ) -> dict[int, dict[str, int]]:
        """{event bucket: {key: value summed over ingest buckets >= min}} of a by-bucket view, without
        ingest buckets in [low, high) of `skip_ingest`."""
        ...

    def close(self) -> None: ...


class RealtimeWriterAdapter(Protocol):
    """Setting `stores.realtime_writer`; built as `cls(settings)` by the speed layer at its first
    micro-batch. Writes are upserts of absolute values: writing the same rows again changes nothing.
    `write` returns once every row is stored, or raises (the micro-batch then fails and is replayed)."""

    def write(
        self, by_key: Sequence[RealtimeRow], by_bucket: Sequence[RealtimeRow], timestamp_us: int | None = None
    ) -> None:
        """`timestamp_us`: the micro-batch's write time, larger for every later batch; a store that
        keeps the latest write per row must keep the value with the larger one. Once the rows are
        stored, whatever its reader's `generation()` returns must change."""

    def close(self) -> None: ...


class VersionStoreAdapter(Protocol):
    """Setting `stores.versions`; built as `cls(settings)` by the batch layer, the reports and
    `lambdactl batch` / `clean-realtime`. `swap` is a compare-and-set: it raises
    stores.pointer.PointerMoved and changes nothing when the pointer is no longer `current`."""

    def pointer(self) -> Pointer | None: ...

    def allocate_version(self) -> int:
        """A new version number, never handed out before."""
        ...

    def record_run(self, version: int, **fields: Any) -> None:
        """Set these fields (JSON values) of the run record of `version`."""
        ...

    def record_run_if(self, version: int, expected: str, /, **fields: Any) -> bool:
        """Set these fields of the run record of `version` only while its state is `expected` (the
        record may have been deleted): the other fields first, each only while it is, then the new
        state, if given, last, so a record is never in the new state without them. False when it is
        not: nothing changed, or (found so at the state's step) the other fields only."""
        ...

    def runs(self) -> dict[int, dict]:
        """{version: run record} of every recorded run."""
        ...

    def swap(self, current: Pointer | None, new: Pointer) -> None: ...

    def retain(self, keep: int, grace_ms: int | None = None) -> list[str]:
        """Drop old versions' tables (never one the pointer names), and run records nothing needs
        any more beyond the `batch.keep_runs` newest; the table names dropped (RetentionIncomplete
        names them when the pass fails after dropping some)."""
        ...


PROTOCOLS: dict[Role, type] = {
    "batch_views": BatchViewReaderAdapter,
    "realtime_reader": RealtimeReaderAdapter,
    "realtime_writer": RealtimeWriterAdapter,
    "versions": VersionStoreAdapter,
}

if TYPE_CHECKING:  # mypy checks that each built-in adapter provides its role's protocol
    from stores.batch_reader import BatchViewReader
    from stores.batch_views import VersionStore
    from stores.realtime import RealtimeReader, RealtimeWriter

    _BATCH_VIEWS: type[BatchViewReaderAdapter] = BatchViewReader
    _REALTIME_READER: type[RealtimeReaderAdapter] = RealtimeReader
    _REALTIME_WRITER: type[RealtimeWriterAdapter] = RealtimeWriter
    _VERSIONS: type[VersionStoreAdapter] = VersionStore
