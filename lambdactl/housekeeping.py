"""`lambdactl housekeeping`: delete Airflow's history older than `airflow.keep_history_days`.

Its task and DAG-processor logs, and its run records through `airflow db clean`
(infra/airflow_housekeeping). The `lambda_housekeeping` DAG runs it daily; running it again, or two
at once, deletes nothing more. Exit 1 when Airflow's clean-up failed or log entries could not be
removed (each part is done whatever the other's outcome).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict
from datetime import UTC, datetime, timedelta

from definitions.settings import Settings
from lambdactl.output import _emit, _say


def cmd_housekeeping(settings: Settings, args: argparse.Namespace) -> int:
    from infra.airflow_housekeeping import HousekeepingFailed, Pruned, clean_metadata, log_folder, prune_logs

    kept_s = kept_history_s(settings)
    days = round(kept_s / 86_400, 1)
    horizon = datetime.now(UTC) - timedelta(seconds=kept_s)
    started = time.monotonic()
    logs_error = ""
    try:
        pruned = prune_logs(log_folder(settings), horizon.timestamp())
    except HousekeepingFailed as exc:
        pruned, logs_error = Pruned(), str(exc)
        _say(f"Airflow's logs were not pruned: {logs_error}")
    else:
        _say(
            f"Airflow's logs before {horizon:%Y-%m-%d %H:%M} UTC ({days:g} days): deleted {pruned.files} files "
            f"({pruned.bytes / 1e6:.1f} MB) and {pruned.folders} folders"
        )
        if pruned.failed:
            logs_error = f"{pruned.failed} entries could not be removed, the first {pruned.first_error}"
            _say(f"Airflow's logs: {logs_error}")
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
                "logs_error": logs_error,
                "records_cleaned": not failure,
                "error": failure,
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    return 1 if failure or logs_error else 0


# A run of the batch DAG: its sensor's wait, then five tasks of up to three tries each.
DAG_TASK_TRIES = 5 * 3


def kept_history_s(settings: Settings) -> float:
    """How far back history is kept: `airflow.keep_history_days`, and never less than the longest a
    batch DAG run can last plus a day. `airflow db clean` picks runs and task instances by when they
    started, whatever their state: a shorter horizon would delete a run still running."""
    longest = settings.batch.completeness_wait_s + DAG_TASK_TRIES * settings.batch.task_timeout_s
    return max(settings.airflow.keep_history_days * 86_400.0, longest + 86_400.0)


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "housekeeping",
        help="delete Airflow's task logs and run records older than airflow.keep_history_days (exit 1: some were not)",
    )
    parser.add_argument("--json", action="store_true", help="also print the outcome as one JSON line")
    parser.set_defaults(func=cmd_housekeeping)
