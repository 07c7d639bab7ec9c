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


def rows_reader(rows: list[tuple], max_mib: int = 32):
    """The realtime store's reader over `rows` as Cassandra would return them (its row handling
    only: the prepared statements are never sent)."""
    from stores.realtime import RealtimeReader

    reader = RealtimeReader.__new__(RealtimeReader)
    reader.settings = Settings(api={"max_read_mib": max_mib})
    reader.max_bytes = max_mib * 2**20
    reader.series_stmt = reader.bucket_stmt = None
    reader._rows = lambda _statement, _params: iter(rows)  # type: ignore[method-assign]
    return reader


def test_rows_the_speed_layer_cannot_have_written_are_refused_not_counted():
    """A distinct view's row without its sketch was counted in the value and left out of the
    union; a top row's key spelt otherwise split one key's counts over two rows."""
    from stores.realtime import BadRealtimeRow

    sketchless = rows_reader([(0, 60, 3, b"\x02\x01\x07\x0c"), (0, 120, 2, None)])
    with pytest.raises(BadRealtimeRow, match="sketch"):
        sketchless.series("visitors", "hour", "[]", [0], 0, with_sketches=True)
    with pytest.raises(BadRealtimeRow, match="value"):
        rows_reader([(0, 60, None, None)]).series("page_views", "hour", "[]", [0], 0)
    for key in ("u-1", "5", '{"a": 1}', "[1]"):
        with pytest.raises(BadRealtimeRow, match="JSON array of strings"):
            rows_reader([(0, 60, key, 1)]).bucket("top_pages", "hour", [0], 0)
    # No cell is negative (every number field of the event contract is): a negative one is damage.
    with pytest.raises(BadRealtimeRow, match="negative value -4"):
        rows_reader([(0, 60, -4, None)]).series("page_views", "hour", "[]", [0], 0)
    with pytest.raises(BadRealtimeRow, match="negative value -4"):
        rows_reader([(0, 60, '["/a"]', -4)]).bucket("top_pages", "hour", [0], 0)
    same = rows_reader([(0, 60, '["/a"]', 2), (0, 120, '[ "/a" ]', 3), (0, 120, '["\\u002fb"]', 1)])
    assert same.bucket("top_pages", "hour", [0], 0) == {0: {'["/a"]': 5, '["/b"]': 1}}


def test_a_wrong_row_is_unavailable_at_once_and_keeps_the_reader(reads):
    """Reading it again, from a new reader, cannot help: one bad row under steady queries kept a
    new Cassandra cluster open per query."""
    from stores.realtime import BadRealtimeRow

    calls = []

    def bad_row(reader):
        calls.append(reader)
        raise BadRealtimeRow("a row without its value")

    with pytest.raises(StoreUnavailable) as refused:
        reads.read(bad_row)
    assert refused.value.component == "cassandra"
    assert len(calls) == 1 and len(Reader.built) == 1 and not Reader.built[0].closed


def test_a_read_holding_more_than_its_budget_is_refused_and_keeps_the_reader(reads):
    """A top-N reads every key that arrived since the cutoff: anyone able to send events with
    distinct long keys made one unauthenticated query hold hundreds of MiB. Past
    api.max_read_mib the query is refused (the API's 422), not retried on a new reader."""
    from stores.adapters import ROW_BYTES, ReadTooLarge

    key = '["/' + "a" * 1000 + '"]'
    fits = 2**20 // (ROW_BYTES + 2 * (len(key) + 3))  # keys up to 3 characters longer: below 1 MiB in all
    rows = [(0, 60, key[:-2] + str(n) + '"]', 1) for n in range(fits)]
    assert len(rows_reader(rows, max_mib=1).bucket("top_pages", "hour", [0], 0)[0]) == fits
    over = rows + [(0, 60, key[:-2] + "x" * ((ROW_BYTES + 2 * len(key)) * 2) + '"]', 1)]
    with pytest.raises(ReadTooLarge, match=r"top_pages: the window holds more than 1 MiB .*narrower window"):
        rows_reader(over, max_mib=1).bucket("top_pages", "hour", [0], 0)
    # Counted as Python holds them: a key of characters beyond the BMP takes 4 bytes each, not 1.
    astral = '["' + "\U0001f600" * 1000 + '"]'
    many = [
        (0, 60, astral[:-2] + str(n) + '"]', 1) for n in range(2**20 // (ROW_BYTES + 2 * (len(astral) + 5)))
    ]  # within 1 MiB counted in characters
    with pytest.raises(ReadTooLarge, match="top_pages"):
        rows_reader(many, max_mib=1).bucket("top_pages", "hour", [0], 0)
    sketch = bytes(4096)
    sketches = [(b, 60, 1, sketch) for b in range(2**20 // (ROW_BYTES + 4096) + 1)]
    with pytest.raises(ReadTooLarge, match="visitors"):
        rows_reader(sketches, max_mib=1).series("visitors", "hour", "[]", [0], 0, with_sketches=True)

    calls = []

    def too_large(reader):
        calls.append(reader)
        raise ReadTooLarge("top_pages: the window holds more than 1 MiB of realtime rows")

    with pytest.raises(ReadTooLarge):
        reads.read(too_large)
    assert len(calls) == 1 and not calls[0].closed


@pytest.mark.parametrize("kind", ["ReadFailure", "ReadTimeout", "InvalidRequest"])
def test_a_read_the_server_refused_keeps_the_reader(reads, kind):
    """Too many tombstones in one partition (ReadFailure), a replica's timeout, a refused query: the
    connection is fine. Each such read built a new cluster (control connection, pools) and left the
    old one open for 30 s: a dashboard polling one such key kept dozens open."""
    import cassandra
    from cassandra import protocol

    refusal = {
        "ReadFailure": lambda: cassandra.ReadFailure("too many tombstones", failures=1),
        "ReadTimeout": lambda: cassandra.ReadTimeout("replica timed out"),
        "InvalidRequest": lambda: protocol.InvalidRequest("bad query"),
    }[kind]

    def refused(reader):
        raise refusal()

    with pytest.raises(StoreUnavailable, match="cassandra"):
        reads.read(refused)
    assert len(Reader.built) == 1 and not Reader.built[0].closed, "the reader stays"
    assert reads.read(lambda r: r.get()) == "rows"
    assert len(Reader.built) == 1


def test_while_no_reader_can_be_made_reads_fail_at_once_not_one_connect_timeout_each(monkeypatch):
    """Cassandra unreachable (no refusal: each connect waits its timeout): every query made its own
    reader under one lock, one after another, so eight queries at once waited up to 80 s and held
    every query slot, `partial=true` ones too."""
    from serving_layer.unavailable import StoreUnavailable

    builds = []

    def unreachable(_settings, timeout_s):
        builds.append(timeout_s)
        raise OSError("timed out")

    monkeypatch.setattr(realtime_reads.registry, "realtime_reader", unreachable)
    reads = RealtimeReads(Settings())
    for _ in range(5):
        with pytest.raises(StoreUnavailable, match="cassandra"):
            reads.read(lambda r: r)
    assert len(builds) == 2, f"{len(builds)} connects while the store stayed unreachable"
    monkeypatch.setattr(realtime_reads, "REBUILD_AFTER_S", 0.0)  # the pause over: tried again
    with pytest.raises(StoreUnavailable):
        reads.read(lambda r: r)
    assert len(builds) == 4


def test_one_failed_connect_is_tried_again_within_the_same_read(monkeypatch):
    """A blink: the read's second attempt makes a reader, as it did before the pause existed."""
    builds = []

    class Reader:
        def close(self):
            pass

    def blinking(_settings, timeout_s):
        builds.append(timeout_s)
        if len(builds) == 1:
            raise OSError("connection reset")
        return Reader()

    monkeypatch.setattr(realtime_reads.registry, "realtime_reader", blinking)
    reads = RealtimeReads(Settings())
    assert isinstance(reads.read(lambda r: r), Reader) and len(builds) == 2


def test_a_reader_whose_set_up_fails_after_connecting_shuts_its_connection_down(monkeypatch):
    """A keyspace or table missing (a node restarting, a cluster never bootstrapped): each query's
    failed reader left a connected cluster behind, with its threads and sockets."""
    from stores import realtime

    shut = []

    class Session:
        def execution_profile_clone_update(self, *_a, **_k):
            return None

        def prepare(self, _statement):
            raise RuntimeError("unconfigured table realtime_by_key")

    class Cluster:
        def connect(self, _keyspace):
            return Session()

        def shutdown(self):
            shut.append(True)

    monkeypatch.setattr(realtime, "cassandra_cluster", lambda _settings, timeout_s: Cluster())
    with pytest.raises(RuntimeError, match="unconfigured table"):
        realtime.RealtimeReader(Settings())
    assert shut == [True]


def test_a_read_fetches_pages_bounded_in_bytes_and_a_few_statements_ahead():
    """A top-N over 2,000 buckets is 20 statements: the driver's concurrent execution sent each next
    one as another answered, so all 20 first pages (5,000 rows each, 40 MB of 4 KB keys) were held
    before a row was counted against api.max_read_mib. Now pages are bounded in bytes for the longest
    keys the events limits allow, and only READS_IN_FLIGHT statements are ahead of the one read."""
    from stores import realtime

    sent: list[int] = []
    taken: list[int] = []

    class Future:
        def __init__(self, n, page):
            self.n, self.page = n, page

        def result(self):
            if self.page is None:
                taken.append(self.n)
            more = self.page is None  # two pages a statement: the second asked by its paging state
            rows = [(self.n, 60, '["/a"]' if more else '["/b"]', 1)]
            return type("Page", (), {"current_rows": rows, "has_more_pages": more, "paging_state": b"p"})()

    class Statement:
        fetch_size = None

    class Session:
        def execution_profile_clone_update(self, *_a, **_k):
            return None

        def prepare(self, _query):
            return Statement()

        def execute_async(self, _statement, values, execution_profile=None, paging_state=None):
            if paging_state is None:
                sent.append(values[2][0])
            return Future(values[2][0], paging_state)

    settings = Settings()
    reader = realtime.RealtimeReader(settings, session=Session())
    worst_row = 2 * settings.events.worst_key_bytes()
    assert reader.bucket_stmt.fetch_size * worst_row <= realtime.PAGE_BYTES
    assert reader.series_stmt.fetch_size * realtime.MAX_SKETCH_BYTES <= realtime.PAGE_BYTES
    assert reader.series_stmt.fetch_size >= 500, "a series still comes hundreds of rows a page"
    rows = reader._rows(reader.bucket_stmt, [("top_pages", "minute", [n], 0) for n in range(20)])
    got = []
    for row in rows:
        got.append(row)
        assert len(sent) - len(taken) <= realtime.READS_IN_FLIGHT, f"{len(sent)} sent with {len(taken)} taken"
    assert [(r[0], r[2]) for r in got] == [(n, k) for n in range(20) for k in ('["/a"]', '["/b"]')], "in order"
    assert sent == taken == list(range(20))


def test_one_key_over_many_ingest_buckets_is_held_once():
    """Each (ingest bucket, key) row counted against api.max_read_mib though the read holds each key
    once: a site of 10,000 urls an hour got 422 for today's top pages after a day without a batch run."""
    rows = [(0, 60 * i, '["/a"]', 1) for i in range(2 * 2**20 // 200)]  # twice 1 MiB counted per row
    rows += [(60, 60 * i, '["/a"]', 2) for i in range(10)]
    assert rows_reader(rows, max_mib=1).bucket("top_pages", "hour", [0, 60], 0) == {
        0: {'["/a"]': len(rows) - 10},
        60: {'["/a"]': 20},
    }
