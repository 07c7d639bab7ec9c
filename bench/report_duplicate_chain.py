"""How the accuracy report's marking of an event's later copies grows with their number.

One event_id sent N times at once (a hostile or broken producer: all within the de-duplication
window, so none is counted again) and N times spread one second apart: `reports.read.later_copies`
on that one chain, in local Spark (no service). Prints the median seconds of `--runs` runs per N,
and the growth from each N to the next: about the ratio of the Ns when the work follows the
chain's length, its square when it followed the square (the fold this replaced: 20,000 copies
took 5.0 s, 40,000 took 19.7 s on the 2-core machine).

    .venv/bin/python bench/report_duplicate_chain.py --sizes 10000,20000,40000,80000 --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

WINDOW_US = 600_000_000  # the default de-duplication window


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,20000,40000,80000")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    from reports.read import later_copies

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-report-duplicate-chain")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    schema = "c array<struct<t:bigint,p:int,o:bigint>>"
    for spread_us, what in ((0, "at once"), (1_000_000, "one second apart")):
        previous = None
        for size in (int(s) for s in args.sizes.split(",")):
            chain = [{"t": i * spread_us, "p": i % 4, "o": i} for i in range(size)]
            frame = spark.createDataFrame([(chain,)], schema).cache()
            frame.count()
            times = []
            for _ in range(args.runs):
                began = time.perf_counter()
                marked = later_copies(frame, WINDOW_US).count()
                times.append(time.perf_counter() - began)
            assert marked == size - 1
            median = statistics.median(times)
            growth = f", x{median / previous[1]:.1f} for x{size / previous[0]:.0f} copies" if previous else ""
            print(f"{size:>7} copies {what}: median {median:.2f} s{growth}", flush=True)
            previous = (size, median)
            frame.unpersist()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
