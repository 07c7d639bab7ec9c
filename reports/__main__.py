"""`python -m reports`: the accuracy report of the serving version's window (or `--version N`'s, or
an explicit `--previous-cutoff-ms` / `--cutoff-ms` window), built, rendered and stored."""

from __future__ import annotations

import argparse
import json
import sys

from definitions.logs import configure_from
from definitions.settings import process_settings
from definitions.spark import spark_session
from reports.build import Window, produce, window_for_version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reports", description="Accuracy report: speed layer versus batch layer over a batch window."
    )
    parser.add_argument("--version", type=int, help="batch version whose window to report (default: the serving one)")
    parser.add_argument("--previous-cutoff-ms", type=int, help="window start (with --cutoff-ms: an explicit window)")
    parser.add_argument("--cutoff-ms", type=int, help="window end")
    args = parser.parse_args(argv)
    settings = process_settings("accuracy-report")
    configure_from("accuracy-report", settings)
    if args.cutoff_ms is not None:
        window = Window(args.previous_cutoff_ms or 0, args.cutoff_ms, args.version, "adhoc")
    else:
        window = window_for_version(settings, args.version)
    spark = spark_session(settings, "lambda-accuracy", {"spark.driver.memory": settings.batch.driver_memory})
    try:
        report, paths = produce(settings, spark, window)
    finally:
        spark.stop()
    sys.stdout.write(
        json.dumps({"id": report["id"], "ok": report["ok"], "problems": report["problems"], **paths}) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
