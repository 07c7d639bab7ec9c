"""HBase through happybase over Thrift, the way the batch layer writes views."""

from __future__ import annotations

from stores.clients import hbase_connection


def test_create_batch_put_scan(settings, stack, unique):
    conn = hbase_connection(settings)
    table_name = f"test_{unique}"
    conn.create_table(table_name, {"v": dict(max_versions=1)})
    try:
        table = conn.table(table_name)
        with table.batch(batch_size=100) as batch:
            for i in range(500):
                batch.put(f"/page/{i % 10}|{i:05d}".encode(), {b"v:count": str(i).encode()})
        rows = list(table.scan(row_start=b"/page/3|", row_stop=b"/page/3|~"))
        assert [int(v[b"v:count"]) for _, v in rows] == list(range(3, 500, 10))
        assert sum(1 for _ in table.scan()) == 500
    finally:
        conn.delete_table(table_name, disable=True)
        conn.close()
    assert (
        f"{settings.hbase.namespace}:{table_name}".encode() not in hbase_connection(settings, namespaced=False).tables()
    )


def test_namespace_and_meta_table_exist(settings, stack):
    conn = hbase_connection(settings, namespaced=False)
    try:
        assert f"{settings.hbase.namespace}:{settings.hbase.meta_table}".encode() in conn.tables()
    finally:
        conn.close()
