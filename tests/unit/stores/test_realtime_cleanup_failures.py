"""The realtime clean-up is never a reason for a batch run to fail (stores/realtime_cleanup.py): a
table it cannot scan, or whose deletions Cassandra keeps refusing, is reported with what it left,
and the deletions it sent are still marked (no service: the session is a stand-in)."""

from __future__ import annotations

from types import SimpleNamespace

from definitions.settings import Settings
from stores import realtime_cleanup
from stores.realtime_scan import ScanError
from stores.realtime_schema import BY_BUCKET, BY_KEY


class Cluster:
    def connect(self, keyspace):
        return SimpleNamespace(prepare=lambda text: text)

    def shutdown(self) -> None:
        pass


def _row(table: str):
    return SimpleNamespace(
        view_name="page_views", granularity="hour", key='["/a"]', event_bucket=0, ingest_bucket=60, table=table
    )


def test_a_table_that_cannot_be_scanned_or_cleaned_is_reported_and_the_rest_is_done(monkeypatch):
    sent: list[str] = []
    marked: list[int] = []

    def scan(session, table, *args, **kwargs):
        yield [_row(table)]
        if table == BY_KEY:
            raise ScanError(f"{table}: 401 token-range reads failed; last: ReadFailure")

    def execute(session, statement, params, **kwargs):
        if kwargs["what"].startswith(BY_BUCKET):
            raise RuntimeError(f"{kwargs['what']} failed for 60s: WriteTimeout")
        sent.append(kwargs["what"])

    class Marks:
        def __init__(self, session, writer) -> None:
            pass

        def next_mark(self):
            marked.append(1)
            return "mark", ()

    monkeypatch.setattr(realtime_cleanup, "cassandra_cluster", lambda settings, timeout_s: Cluster())
    monkeypatch.setattr(realtime_cleanup, "scan", scan)
    monkeypatch.setattr(realtime_cleanup, "execute_with_retries", execute)
    monkeypatch.setattr(realtime_cleanup, "WriteMarks", Marks)
    result = realtime_cleanup.delete_absorbed(Settings(), {"page_views": 120})
    assert sent == [f"{BY_KEY} deletions", "deletion marks"]
    assert [u.table for u in result.unreadable] == [BY_KEY, BY_BUCKET]
    assert "ScanError" in result.unreadable[0].error and "WriteTimeout" in result.unreadable[1].error
    assert not result.complete and "could not be read" in result.summary()
    assert marked, "the deletions sent before the failure are marked: readers keeping rows read again"
