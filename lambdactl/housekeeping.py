"""`lambdactl housekeeping`: delete Airflow's history older than `airflow.keep_history_days`.

Its task and DAG-processor logs, and its run records through `airflow db clean`
(infra/airflow_housekeeping). The `lambda_housekeeping` DAG runs it daily; running it again, or two
at once, deletes nothing more. Exit 1 when Airflow's clean-up failed (the logs are pruned anyway).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict
from datetime import UTC, datetime, timedelta

from definitions.settings import Settings
from lambdactl.output import _emit, _say


def cmd_housekeeping(settings: Settings, args: argparse.Namespace) -> int:
    from infra.airflow_housekeeping import HousekeepingFailed, clean_metadata, log_folder, prune_logs

    days = settings.airflow.keep_history_days
    horizon = datetime.now(UTC) - timedelta(days=days)
    started = time.monotonic()
    pruned = prune_logs(log_folder(settings), horizon.timestamp())
    _say(
        f"Airflow's logs before {horizon:%Y-%m-%d %H:%M} UTC ({days} days): deleted {pruned.files} files "
        f"({pruned.bytes / 1e6:.1f} MB) and {pruned.folders} folders"
    )
    failure = ""
    try:
        clean_metadata(settings, horizon)
    except (HousekeepingFailed, FileNotFoundError) as exc:
        failure = str(exc)
        _say(f"Airflow's run records were not cleaned: {failure}")
    else:
        _say("Airflow's run records before the same time: cleaned (`airflow db clean`)")
    if args.json:
        _emit(
            {
                "before": horizon.isoformat(),
                "logs": asdict(pruned),
                "records_cleaned": not failure,
                "error": failure,
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    return 1 if failure else 0


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "housekeeping",
        help="delete Airflow's task logs and run records older than airflow.keep_history_days (exit 1: "
        "its records were not cleaned)",
    )
    parser.add_argument("--json", action="store_true", help="also print the outcome as one JSON line")
    parser.set_defaults(func=cmd_housekeeping)
