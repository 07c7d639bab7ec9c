"""Realtime-row writes to Cassandra as the speed layer's executors make them, by batch size.

Realtime-shaped rows (half `realtime_by_key` rows of a count view over `--keys` URLs, a tenth of
them with a distinct view's sketch; half `realtime_by_bucket` rows of a top-N view) are upserted
through `stores.realtime.RealtimeWriter` into a throwaway keyspace of the running Cassandra, once
per `--batch-bytes` entry (`speed.write_batch_bytes`: 0 sends every row alone; more groups rows
that live on the same replicas into unlogged batches of about that many bytes), `--runs` times
each. Prints rows/s (median) per setting and the ratio to the first; every run's rows are read
back and checked. The keyspace is dropped at the end.

    .venv/bin/python bench/realtime_writes.py --rows 20000 --json /tmp/bench_realtime_writes.json
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

from figures import configure_logging, emit, fmt, int_list  # bench/ itself: the scripts run as files

from definitions.settings import get_settings
from stores.clients import cassandra_cluster
from stores.realtime import RealtimeReader, RealtimeRow, RealtimeWriter
from stores.realtime_schema import ensure_keyspace

log = logging.getLogger("bench.realtime_writes")


def rows(seed: int, count: int, keys: int) -> tuple[list[RealtimeRow], list[RealtimeRow]]:
    r = random.Random(seed)
    by_key, by_bucket = [], []
    for i in range(count // 2):
        url = f"/bench/{r.randrange(keys)}"
        if i % 10 == 0:
            by_key.append(
                RealtimeRow(
                    "unique_visitors",
                    "minute",
                    url,
                    60 * (i % 5),
                    60,
                    r.randrange(1000),
                    os.urandom(r.randrange(40, 2500)),
                )
            )
        else:
            by_key.append(RealtimeRow("page_views", "minute", url, 60 * (i % 5), 60, r.randrange(1000)))
        by_bucket.append(RealtimeRow("top_pages", "minute", url, 60 * (i % 3), 60, r.randrange(1000)))
    # one row per primary key: the last write of a key wins, as in a micro-batch
    dedup = lambda rs, key: list({key(x): x for x in rs}.values())  # noqa: E731
    return (
        dedup(by_key, lambda x: (x.view, x.key, x.event_bucket)),
        dedup(by_bucket, lambda x: (x.event_bucket, x.key)),
    )


def check(reader: RealtimeReader, by_key: list[RealtimeRow], by_bucket: list[RealtimeRow]) -> None:
    sample = by_key[:: max(1, len(by_key) // 200)]
    for row in sample:
        got = reader.series(row.view, row.granularity, row.key, [row.event_bucket], 0)
        assert got[row.event_bucket].value == row.value, f"{row} read back as {got}"
    buckets = reader.bucket("top_pages", "minute", sorted({r.event_bucket for r in by_bucket}), 0)
    for row in by_bucket:
        assert buckets[row.event_bucket][row.key] == row.value, f"{row} read back wrong"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=5_000)
    parser.add_argument("--batch-bytes", type=int_list, default=int_list("0,5120,16384"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure_logging()
    logging.getLogger("cassandra").setLevel(logging.ERROR)  # its warnings about the throw-away keyspace
    base = get_settings()
    keyspace = f"bench_writes_{uuid.uuid4().hex[:8]}"
    settings = base.model_copy(update={"cassandra": base.cassandra.model_copy(update={"keyspace": keyspace})})
    ensure_keyspace(settings)
    result: dict = {
        "rows": args.rows,
        "keys": args.keys,
        "runs": args.runs,
        "concurrency": base.speed.write_concurrency,
        "settings": [],
    }
    try:
        reader = RealtimeReader(settings)
        for batch_bytes in args.batch_bytes:
            chosen = settings.model_copy(
                update={"speed": settings.speed.model_copy(update={"write_batch_bytes": batch_bytes})}
            )
            writer = RealtimeWriter(chosen)
            rates, loads = [], []
            try:
                for run in range(args.runs):
                    by_key, by_bucket = rows(run, args.rows, args.keys)
                    started = time.monotonic()
                    writer.write(by_key, by_bucket)
                    rates.append((len(by_key) + len(by_bucket)) / (time.monotonic() - started))
                    loads.append(os.getloadavg()[0])
                    check(reader, by_key, by_bucket)
                    log.info("write_batch_bytes=%d run %d: %.0f rows/s", batch_bytes, run + 1, rates[-1])
            finally:
                writer.close()
            result["settings"].append(
                {"write_batch_bytes": batch_bytes, "rows_per_s": statistics.median(rates), "runs": rates, "load": loads}
            )
        reader.close()
    finally:
        cluster = cassandra_cluster(base)
        try:
            cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {keyspace}")
        finally:
            cluster.shutdown()
    first = result["settings"][0]["rows_per_s"]
    lines = [
        f"Realtime rows upserted through RealtimeWriter ({args.rows:,} rows per run, {base.speed.write_concurrency} in flight, median of {args.runs})"
    ]
    lines.append(f"{'write_batch_bytes':>17} {'rows/s':>9} {'x':>6}   runs")
    for s in result["settings"]:
        lines.append(
            f"{s['write_batch_bytes']:>17} {fmt(s['rows_per_s']):>9} {s['rows_per_s'] / first:>6.2f}   "
            + ", ".join(fmt(r) for r in s["runs"])
        )
    emit(result, "\n".join(lines), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
