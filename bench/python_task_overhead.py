"""The fixed cost of a Spark job whose tasks run Python: an empty `mapInArrow` over `--partitions`
partitions, the shape of the speed layer's write when a micro-batch has nothing to write, timed
with and without `definitions.python_workers.skip_unchanged_zip_rereads` in the function. The
skipping runs come after every plain one (a worker that ran it once keeps it); the first `--warmup`
of each kind are dropped. Prints the median wall time of each kind and the ratio.

    .venv/bin/python bench/python_task_overhead.py --runs 20

Needs no running service (a local Spark session, `spark.master` from settings).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from definitions.python_workers import skip_unchanged_zip_rereads  # noqa: E402
from definitions.settings import get_settings  # noqa: E402
from definitions.spark import spark_session  # noqa: E402


def empty_writer(skip: bool):
    def write(batches):
        import pyarrow as pa

        if skip:
            skip_unchanged_zip_rereads()
        rows = sum(batch.num_rows for batch in batches)
        yield pa.RecordBatch.from_pydict({"written": [rows]}, schema=pa.schema([("written", pa.int64())]))

    return write


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20, help="jobs of each kind")
    parser.add_argument("--warmup", type=int, default=4, help="first jobs of each kind not counted")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if not 0 <= args.warmup < args.runs:
        parser.error("--warmup must be at least 0 and less than --runs: some jobs must be counted")

    settings = get_settings()
    spark = spark_session(settings, "bench-python-task-overhead", {"spark.sql.shuffle.partitions": "2"})
    try:
        empty = spark.range(0, 1000, numPartitions=args.partitions).where("id < 0")
        before, skipping = "Python, as before", "Python, unchanged zips skipped"
        times: dict[str, list[float]] = {before: [], skipping: []}
        for name, skip in ((before, False), (skipping, True)):
            for _ in range(args.runs):
                started = time.perf_counter()
                empty.mapInArrow(empty_writer(skip), "written long").collect()
                times[name].append(time.perf_counter() - started)
    finally:
        spark.stop()

    medians = {k: round(statistics.median(v[args.warmup :]) * 1000, 1) for k, v in times.items()}
    ratio = round(medians[before] / medians[skipping], 2)
    if args.json:
        print(json.dumps({"median_ms": medians, "before_over_after": ratio, "runs": args.runs}))
        return 0
    for name, ms in medians.items():
        print(f"{name:>32}: {ms:8.1f} ms per job (median of {args.runs - args.warmup})")
    print(f"an empty Python job, before / after: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
