"""Validation inside Spark: the contract's JVM validator (what the archiver and the speed layer run)
against the contract's Python validator run as a pandas UDF (what they ran before), on the same
records in the same local Spark session.

Records: `--records` Kafka-shaped rows, 90 % valid generated events, 10 % from the hostile corpus.
Each run counts verdicts over a cached input, so the time is validation, not record generation.
Prints records/s per validator (median of `--runs`) and the ratio; the verdict counts of both
must agree or the benchmark stops.

    .venv/bin/python bench/validation_throughput.py --records 500000 --runs 3

Needs no running service (a local Spark session, `spark.master` from settings).
"""

# No `from __future__ import annotations`: pandas_udf reads the UDF's type hints at run time.

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from definitions.events import FIELD_NAMES, VALIDATION_DDL, verdict  # noqa: E402
from definitions.layer_settings import EventLimits  # noqa: E402
from definitions.settings import get_settings  # noqa: E402
from definitions.spark import spark_session  # noqa: E402
from ingest.generator import ClickstreamGenerator, GeneratorConfig  # noqa: E402
from stores.kafka_source import LOG_APPEND_TIME, validated_events  # noqa: E402
from tests.support.hostile import corpus  # noqa: E402

KAFKA_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, timestampType INT"
)


def python_validated(records, limits: EventLimits):
    """The contract's Python validator as the jobs ran it before: a pandas UDF over each record."""
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.functions import pandas_udf

    empty = {name: None for name in FIELD_NAMES}

    @pandas_udf(VALIDATION_DDL)  # type: ignore[call-overload]
    def validate_records(values: pd.Series, ingest_ms: pd.Series) -> pd.DataFrame:
        rows = []
        for raw, ingest in zip(values, ingest_ms, strict=True):
            event, reason = verdict(raw, int(ingest), limits)
            rows.append({"reason": None, **event} if event is not None else {"reason": reason, **empty})
        frame = pd.DataFrame(rows, columns=["reason", *FIELD_NAMES])
        for name in ("event_time", "schema_version"):
            frame[name] = frame[name].astype("Int64")
        return frame

    return records.select(validate_records(F.col("value"), F.unix_millis(F.col("timestamp"))).alias("v")).select(
        "v.reason"
    )


def count_verdicts(frame) -> tuple[int, int]:
    from pyspark.sql import functions as F

    row = frame.agg(F.count(F.lit(1)).alias("n"), F.count("reason").alias("invalid")).collect()[0]
    return int(row["n"]), int(row["invalid"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    settings = get_settings()
    spark = spark_session(settings, "bench-validation", {"spark.sql.shuffle.partitions": "2"})
    ingested = datetime.now(UTC)
    hostile = [value for _, _, value in corpus(seed=7, count=max(args.records // 10, 10))]
    valid_count = args.records - len(hostile)
    generated = ClickstreamGenerator(GeneratorConfig(seed=7, count=valid_count, span_s=3_600.0)).records()
    values = hostile + [record.value for record in generated]
    rows = [(b"k", v, "events", i % 4, i, ingested, LOG_APPEND_TIME) for i, v in enumerate(values)]
    records = spark.createDataFrame(rows, KAFKA_DDL).repartition(4).cache()
    records.count()

    limits = settings.events
    figures: dict[str, dict] = {}
    for name, build in (
        ("jvm", lambda: validated_events(records, limits)),
        ("python_udf", lambda: python_validated(records, limits)),
    ):
        count_verdicts(build())  # untimed: warms the JVM, starts Python workers for the UDF
        times, verdicts = [], None
        for _ in range(args.runs):
            started = time.perf_counter()
            verdicts = count_verdicts(build())
            times.append(time.perf_counter() - started)
        median = statistics.median(times)
        figures[name] = {
            "seconds": [round(t, 2) for t in times],
            "median_s": round(median, 2),
            "records_per_s": round(len(values) / median),
            "verdicts": {"records": verdicts[0], "invalid": verdicts[1]} if verdicts else None,
        }
        print(f"{name:>10}: {figures[name]['records_per_s']:,} records/s (median of {args.runs}: {median:.2f} s)")
    if figures["jvm"]["verdicts"] != figures["python_udf"]["verdicts"]:
        raise SystemExit(
            f"the validators disagree: {figures['jvm']['verdicts']} vs {figures['python_udf']['verdicts']}"
        )
    ratio = figures["jvm"]["records_per_s"] / figures["python_udf"]["records_per_s"]
    print(f"records: {len(values):,} ({len(hostile):,} hostile); JVM / Python UDF: {ratio:.1f}x")
    if args.json:
        args.json.write_text(json.dumps({"records": len(values), "ratio": round(ratio, 2), **figures}, indent=2))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
