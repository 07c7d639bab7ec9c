"""What reading every batch run record costs as they accumulate, and what retention's pruning
keeps it at.

Every swap, verification, retention pass and report reads all run records of the meta table
(`VersionStore.runs`); an hourly schedule adds 8,760 a year. On a meta table of its own in the
running stack's HBase, this writes N records (ended runs, as retention leaves them), prints the
median time of `--runs` reads per N, then runs retention once and prints how many records are
left (`batch.keep_runs`) and what a read costs right after it, and once the deletes are flushed and
compacted away (as HBase's hourly flush and the compaction each retention pass asks for do). The
table is dropped at the end.

    .venv/bin/python bench/run_records.py --sizes 500,2000,8760 --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,2000,8760")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    from definitions.settings_store import load
    from stores import batch_layout as layout
    from stores.batch_views import VersionStore
    from stores.clients import hbase_connection

    settings = load()
    meta = f"bench_runs_{os.getpid()}"
    settings = settings.model_copy(update={"hbase": settings.hbase.model_copy(update={"meta_table": meta})})

    def admin(*calls: tuple[str, tuple]) -> None:
        conn = hbase_connection(settings)  # a fresh one: the Thrift server closes idle connections
        try:
            for name, call_args in calls:
                getattr(conn, name)(*call_args)
        finally:
            conn.close()

    def flushed() -> None:
        """The table's rows written out of the memstore (closing its region flushes it), as HBase's
        own periodic flush does within an hour; Thrift has no flush call."""
        admin(("disable_table", (meta,)), ("enable_table", (meta,)))

    admin(("create_table", (meta, {"p": dict(max_versions=1)})))
    store = VersionStore(settings)

    def read_s() -> tuple[float, int]:
        times, found = [], 0
        for _ in range(args.runs):
            began = time.perf_counter()
            found = len(store.runs())
            times.append(time.perf_counter() - began)
        return statistics.median(times), found

    try:
        written, first = 0, 0.0
        # Views of its own: retention considers only the views its run records name, so the stack's
        # own tables (of page_views, ...) are never its to drop.
        views = [f"{meta}_a", f"{meta}_b"]
        record = {
            "state": "dropped",
            "cutoff_ms": 1_800_000_000_000,
            "previous_cutoff_ms": 1_799_996_400_000,
            "views": views,
        }
        cells = {f"p:{k}".encode(): json.dumps(v).encode() for k, v in record.items()}  # as record_run writes
        for size in (int(s) for s in args.sizes.split(",")):
            conn = hbase_connection(settings)
            try:
                with conn.table(meta).batch(batch_size=1_000) as batch:
                    for version in range(written + 1, size + 1):
                        batch.put(layout.run_row(version), cells)
            finally:
                conn.close()
            written = max(written, size)
            flushed()
            median, found = read_s()
            first = first or median
            print(f"{found:>7} run records: a read takes median {median * 1000:.0f} ms", flush=True)
        before = set(store.tables())
        began = time.perf_counter()
        assert store.retain(settings.batch.keep_versions) == [], "no table of the stack's is this bench's to drop"
        took = time.perf_counter() - began
        median, found = read_s()
        print(
            f"retention took {took:.2f} s; right after it ({found} kept, batch.keep_runs "
            f"{settings.batch.keep_runs}): a read takes median {median * 1000:.0f} ms",
            flush=True,
        )
        # A scan reads over deleted rows until they are flushed and a major compaction (which each
        # retention pass asks for) drops them.
        flushed()
        admin(("compact_table", (meta, True)))
        waited = time.perf_counter()
        while time.perf_counter() - waited < 120:
            median, found = read_s()
            if median < first * 2:
                break
            time.sleep(1)
        print(
            f"flushed and compacted, {time.perf_counter() - waited:.0f} s later: a read takes median "
            f"{median * 1000:.0f} ms"
        )
        assert set(store.tables()) == before
    finally:
        admin(("delete_table", (meta, True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
