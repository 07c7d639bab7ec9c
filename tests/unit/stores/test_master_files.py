"""Files the master dataset's directories may hold besides the platform's own (no services: the
HDFS listing is given). A commit killed part-way leaves Spark's temporary file in the sink's log,
and anyone may drop a file into the completeness directory: neither may stop the archiver or
every batch run, and no marker may say more than the archiver wrote."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from definitions.settings import Settings
from stores import completeness, master
from stores.completeness import Completeness, MarkerMalformed, PartitionProgress


class Directory:
    """An HDFS directory as WebHdfs lists and reads it."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files

    def list(self, path: str) -> list[str]:
        return sorted(self.files)

    def read(self, path: str, max_bytes: int | None = None) -> bytes | None:
        return self.files.get(path.rsplit("/", 1)[1])


def marker(batch_id: int, before_ms: int) -> bytes:
    return Completeness(batch_id, 1, {0: PartitionProgress(5, before_ms)}, 1).to_json().encode()


def test_a_temporary_file_in_the_sink_log_is_not_a_batch():
    log = Directory({"0": b"", "9": b"", "10.compact": b"", ".11.5f1c-ab.tmp": b"", "_x": b""})
    assert master.last_archived_batch(log, Settings()) == 10  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        b"",
        b"\xff\xfe",
        b"[]",
        b'{"partitions": []}',
        b'{"batch_id": 1, "written_ms": 1, "partitions": {"0": {"next_offset": 1}}}',
        b'{"batch_id": 1, "written_ms": 1, "partitions": {"0": {"next_offset": 1, "complete_before_ms": NaN}}}',
        b'{"batch_id": 1, "written_ms": 1, "partitions": {"0": {"next_offset": 1, "complete_before_ms": 1e300}}}',
        b'{"batch_id": 1, "written_ms": 1, "partitions": {"0": {"next_offset": 1, "complete_before_ms": -5}}}',
        b'{"batch_id": true, "written_ms": 1, "partitions": {}}',
        b'{"batch_id": 1, "written_ms": 1, "partitions": {"p0": {"next_offset": 1, "complete_before_ms": 1}}}',
        b'{"partitions": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
        # partition numbers Python's int() takes but no archiver writes ("7_7" was partition 77)
        *(
            b'{"batch_id": 1, "written_ms": 1, "expected_partitions": 80, "partitions": {"%s": '
            b'{"next_offset": 1, "complete_before_ms": 1}}}' % key
            for key in (b"7_7", b" 1", b"+1", b"01", b"\\u0661")
        ),
        # no count of partitions: 0, and any partition's progress was taken as the whole topic's
        b'{"batch_id": 1, "written_ms": 1, "partitions": {"0": {"next_offset": 1, "complete_before_ms": 1}}}',
        # a count of 0 beside progress
        b'{"batch_id": 1, "written_ms": 1, "expected_partitions": 0, "partitions": {"0": {"next_offset": 1, '
        b'"complete_before_ms": 1}}}',
    ],
)
def test_a_file_that_holds_no_marker_is_malformed(text):
    with pytest.raises(MarkerMalformed):
        Completeness.from_json(text)


def test_a_marker_reads_back_as_written():
    assert Completeness.from_json(marker(7, 60_000)).complete_before_ms == 60_000
    # Partitions added as the archiver published: the broker it asked knew fewer than the batch read.
    ahead = Completeness(9, 1, {0: PartitionProgress(5, 60_000), 1: PartitionProgress(3, 90_000)}, 1)
    assert Completeness.from_json(ahead.to_json()).complete_before_ms == 60_000


def test_the_newest_marker_is_the_newest_of_the_archivers_own_and_a_broken_one_is_passed_over(monkeypatch):
    files = {
        "000000000007.json": marker(7, 60_000),
        "000000000008.json": marker(8, 120_000),
        "000000000009.json": b'{"batch_id": 9, "partitions": {"0": {"complete_before_ms": NaN}}}',
        # named after a batch it is not: it hid every newer marker, and no pruning removed it
        "999999999999.json": marker(6, 999_999),
        "README": b"# notes",  # sorts after every marker: it was taken for the newest, on every run
        "_tmp-000000000010.json": marker(10, 999_999),
    }

    @contextmanager
    def hdfs(_settings):
        yield Directory(files)

    monkeypatch.setattr(completeness, "WebHdfs", hdfs)
    found = completeness.latest(Settings())
    assert found is not None and (found.batch_id, found.complete_before_ms) == (8, 120_000)
