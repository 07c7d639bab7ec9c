"""One failed realtime read does not fail the reads beside it (no services needed): the reader it
failed on is replaced for later reads, and closed only once reads still using it had their time."""

from __future__ import annotations

import threading
import time

import pytest

from definitions.settings import Settings
from serving_layer import realtime_reads
from serving_layer.realtime_reads import RealtimeReads
from serving_layer.unavailable import StoreUnavailable


class Reader:
    """A store client whose calls fail once it is closed, as a shut-down cluster's do."""

    built: list[Reader] = []

    def __init__(self) -> None:
        self.closed = False
        Reader.built.append(self)

    def close(self) -> None:
        self.closed = True

    def get(self, fail: threading.Event | None = None) -> str:
        time.sleep(0.05)
        if fail is not None and not fail.is_set():
            fail.set()
            raise TimeoutError("read timed out")
        if self.closed:
            raise RuntimeError("Cluster is already shut down")
        return "rows"


@pytest.fixture
def reads(monkeypatch):
    Reader.built = []
    monkeypatch.setattr(realtime_reads.registry, "realtime_reader", lambda _settings, timeout_s: Reader())
    monkeypatch.setattr(realtime_reads, "CLOSE_AFTER_S", 0.5)
    return RealtimeReads(Settings())


def test_a_transient_failure_fails_no_read_beside_it(reads):
    once = threading.Event()
    results: list[str] = []
    errors: list[Exception] = []

    def query(i: int) -> None:
        try:
            results.append(reads.read(lambda r: r.get(once if i == 3 else None)))
        except Exception as exc:  # noqa: BLE001 - the test counts every failure
            errors.append(exc)

    threads = [threading.Thread(target=query, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and results == ["rows"] * 8
    assert len(Reader.built) == 2, "one new reader for the failed read, not one per read beside it"
    first = Reader.built[0]
    deadline = time.monotonic() + 5
    while not first.closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert first.closed, "the replaced reader is closed once reads using it had their time"


def test_a_read_failing_on_every_reader_is_store_unavailable(reads):
    def always(_reader):
        raise TimeoutError("down")

    with pytest.raises(StoreUnavailable, match="cassandra"):
        reads.read(always)
