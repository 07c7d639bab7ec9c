"""Reading a batch view table back for tests, straight through happybase and the layout."""

from __future__ import annotations

from definitions.views import View
from stores import batch_layout as layout
from stores.clients import hbase_connection


def read_table(settings, table: str, view: View) -> dict[str, dict[tuple, tuple[int, bytes | None]]]:
    """{granularity: {(key parts..., bucket): (value, sketch)}}"""
    out: dict[str, dict[tuple, tuple[int, bytes | None]]] = {}
    conn = hbase_connection(settings)
    try:
        for row, data in conn.table(table).scan(batch_size=5_000):
            keys, granularity, bucket = layout.parse_row_key(view, row)
            cells = out.setdefault(granularity, {})
            if view.layout == "by_bucket":
                for column, value in data.items():
                    cells[(*layout.decode_key(column[2:]), bucket)] = (layout.decode_int(value), None)
            else:
                cells[(*keys, bucket)] = (layout.decode_int(data[layout.VALUE]), data.get(layout.SKETCH))
    finally:
        conn.close()
    return out
