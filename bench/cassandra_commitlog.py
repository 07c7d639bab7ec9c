"""The cost of Cassandra's commit log durability modes on realtime-row writes.

For each mode (`cassandra.commitlog_sync`: batch, group, periodic) a throwaway single-node
Cassandra is started from an empty state directory on its own ports (beside a running stack),
then realtime-shaped rows are upserted the way the speed layer writes them: prepared statements,
`write_concurrency` requests in flight. Prints write throughput and single-write latency per mode
and the ratio to `periodic` (the mode that can lose acknowledged writes).

    .venv/bin/python bench/cassandra_commitlog.py --rows 50000 --json bench/results/commitlog.json
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

from figures import configure_logging, emit, fmt, percentile

from definitions.settings import get_settings
from infra.stack import Stack
from stores.clients import cassandra_cluster

log = logging.getLogger("bench.cassandra_commitlog")
MODES = ("batch", "group", "periodic")


def measure(mode: str, rows: int, concurrency: int, port: int) -> dict:
    from cassandra.concurrent import execute_concurrent_with_args

    base = get_settings()
    with tempfile.TemporaryDirectory(prefix=f"commitlog-{mode}-") as state:
        cassandra = base.cassandra.model_copy(update={"port": port, "storage_port": port + 1, "commitlog_sync": mode})
        settings = base.model_copy(update={"state_dir": Path(state), "cassandra": cassandra})
        stack = Stack(settings, names=["cassandra"])  # this node only: no bootstrap of the running stack
        stack.up()
        cluster = cassandra_cluster(settings, timeout_s=30)
        try:
            session = cluster.connect()
            session.execute(
                "CREATE KEYSPACE bench WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
            )
            session.execute(
                "CREATE TABLE bench.realtime (view_name text, key text, event_bucket bigint, "
                "ingest_bucket bigint, value bigint, PRIMARY KEY ((view_name, key), event_bucket, ingest_bucket))"
            )
            insert = session.prepare(
                "INSERT INTO bench.realtime (view_name, key, event_bucket, ingest_bucket, value) VALUES (?, ?, ?, ?, ?)"
            )
            args = [
                ("page_views", f"/p/{i % 5_000}", 1_700_000_000 + (i // 5_000) * 60, 1_700_000_000, i)
                for i in range(rows)
            ]
            execute_concurrent_with_args(session, insert, args[:2_000], concurrency=concurrency)  # warm-up
            started = time.perf_counter()
            results = execute_concurrent_with_args(
                session, insert, args, concurrency=concurrency, raise_on_first_error=True
            )
            elapsed = time.perf_counter() - started
            assert all(ok for ok, _ in results)
            latencies = []
            for i in range(500):
                t = time.perf_counter()
                session.execute(insert, ("single", f"/s/{i}", 1, 1, i))
                latencies.append((time.perf_counter() - t) * 1000)
        finally:
            cluster.shutdown()
            stack.down()
    return {
        "mode": mode,
        "rows": rows,
        "concurrency": concurrency,
        "rows_per_s": rows / elapsed,
        "single_write_ms_p50": statistics.median(latencies),
        "single_write_ms_p99": percentile(latencies, 99),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--concurrency", type=int, default=get_settings().speed.write_concurrency)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--port", type=int, default=19_142, help="native port of the throwaway node (storage: +1)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure_logging("infra")
    results = [measure(mode, args.rows, args.concurrency, args.port) for mode in args.modes.split(",")]
    periodic = next((r for r in results if r["mode"] == "periodic"), None)
    lines = [
        f"Cassandra commit log modes: {args.rows:,} realtime rows, {args.concurrency} writes in flight\n",
        f"{'mode':<10} {'rows/s':>10} {'vs periodic':>12} {'1 write p50 ms':>15} {'p99 ms':>8}\n",
    ]
    for r in results:
        ratio = r["rows_per_s"] / periodic["rows_per_s"] if periodic else None
        lines.append(
            f"{r['mode']:<10} {fmt(r['rows_per_s']):>10} {fmt(ratio, 2):>12} "
            f"{fmt(r['single_write_ms_p50'], 2):>15} {fmt(r['single_write_ms_p99'], 2):>8}\n"
        )
    emit({"benchmark": "cassandra_commitlog", "results": results}, "".join(lines), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
