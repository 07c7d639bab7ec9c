"""A batch run's table is created new, never over one that exists: versions come from the meta
table's counter, so a table of that name belongs to another run (a counter restored from a backup
behind its tables, another meta table sharing the namespace) — one the pointer may serve. It was
deleted and refilled in place: answers read a missing, then half-written, table."""

from __future__ import annotations

import pytest

from definitions.settings import Settings
from stores import batch_writer


class Hbase:
    def __init__(self, tables: set[bytes]) -> None:
        self.existing = set(tables)
        self.deleted: list[str] = []

    def tables(self) -> list[bytes]:
        return sorted(self.existing)

    def delete_table(self, name: str, disable: bool = False) -> None:
        self.deleted.append(name)
        self.existing.discard(name.encode())

    def create_table(self, name: str, families: dict) -> None:
        assert name.encode() not in self.existing, "HBase refuses to create a table that exists"
        self.existing.add(name.encode())

    def close(self) -> None:
        pass


def test_a_table_that_exists_is_refused_and_left_alone(monkeypatch):
    hbase = Hbase({b"page_views_v40"})
    monkeypatch.setattr(batch_writer, "hbase_connection", lambda _settings: hbase)
    with pytest.raises(RuntimeError, match="page_views_v40 exists already.*version counter"):
        batch_writer.create_table(Settings(), "page_views_v40")
    assert hbase.deleted == [] and hbase.existing == {b"page_views_v40"}
    batch_writer.create_table(Settings(), "page_views_v41")
    assert hbase.existing == {b"page_views_v40", b"page_views_v41"}
