"""Upserting a realtime row of a count or sum view leaves no tombstone (real Cassandra, a keyspace of
its own): such a row has no sketch, and a null bound for it would write one cell tombstone per row
and write, which every read of the partition then steps over."""

from __future__ import annotations

import re
import uuid

from cassandra.query import SimpleStatement

from stores.clients import cassandra_cluster
from stores.realtime import RealtimeRow
from stores.realtime_schema import BY_KEY
from tests.support.cassandra_keyspace import scratch_realtime

T = 1_800_000_000


def test_rows_without_a_sketch_are_written_without_tombstones(settings, stack):
    name = f"test_tombstones_{uuid.uuid4().hex[:8]}"
    with scratch_realtime(settings, name) as (writer, _reader):
        for value in (1, 2):  # a second micro-batch updates the same rows
            writer.write([RealtimeRow("page_views", "minute", "/t", T + 60 * i, T, value) for i in range(5)], [])
        writer.write([RealtimeRow("unique_visitors", "minute", "/t", T, T, 1, b"\x01sketch")], [])
        cluster = cassandra_cluster(settings)
        try:
            session = cluster.connect(name)
            query = f"SELECT value, sketch FROM {BY_KEY} WHERE view_name = %s AND granularity = 'minute' AND key = '/t'"
            result = session.execute(SimpleStatement(query), ("page_views",), trace=True)
            assert [(r.value, r.sketch) for r in result] == [(2, None)] * 5
            said = [e.description for e in result.get_query_trace(max_wait_sec=10).events]
            read = [m for m in (re.search(r"Read (\d+) live rows and (\d+) tombstone cells", d) for d in said) if m]
            assert read and all(m.group(2) == "0" for m in read), said
            sketches = session.execute(query, ("unique_visitors",))
            assert [r.sketch for r in sketches] == [b"\x01sketch"]
        finally:
            cluster.shutdown()
