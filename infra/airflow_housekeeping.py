"""Airflow's history, kept for `airflow.keep_history_days` and no longer.

Airflow writes a log file per task attempt and a dated folder of DAG-processor logs a day, and keeps
every run, task instance, XCom and audit-log row in its database; none of it is ever removed on its
own. `lambdactl housekeeping` (run daily by the `lambda_housekeeping` DAG) deletes the older log
files and runs Airflow's own `airflow db clean` on the older records. Only complete history goes:
a file or folder still written to is newer than the horizon, and `db clean` keeps each DAG's latest
scheduled run.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from definitions.files import state_lock
from definitions.settings import Settings
from infra.airflow import airflow_home, check_installed, environment
from infra.process import dies_with_this_thread

# The tables `airflow db clean` empties of older rows. Not `dag` nor `dag_version`: Airflow 3.1's
# clean-up of those stops on a foreign key a newer task instance still holds (apache/airflow#63703);
# they grow by one row per DAG and per change of a DAG file, not per run.
CLEANED_TABLES = (
    "dag_run",
    "task_instance",
    "task_instance_history",
    "task_reschedule",
    "xcom",
    "log",
    "job",
    "import_error",
    "callback_request",
    "asset_event",
    "deadline",
)
# `db clean` and `db drop-archived` together: `db clean` deletes in batches, a day's rows take seconds.
# Within the DAG task's command time (an hour less a minute) with the log files' pruning before it.
CLEAN_TIMEOUT_S = 1_800
# Rows deleted per transaction: the first clean-up of a long-lived install holds SQLite's write lock
# (which the scheduler and the API server wait on) a batch at a time, not for months of rows at once.
CLEAN_BATCH_ROWS = 1_000
# What `airflow db clean` logs, and otherwise ignores, when a table's clean-up fails (a database
# busy past its wait): it still exits 0 (airflow/utils/db_cleanup.py, _suppress_with_logging).
TABLE_FAILED = re.compile(r"Encountered error when attempting to clean table '([^']*)'")


class HousekeepingFailed(RuntimeError):
    """Airflow's clean-up failed: the message names its exit and last words."""


@dataclass(frozen=True)
class Pruned:
    files: int = 0
    bytes: int = 0
    folders: int = 0
    failed: int = 0  # entries that could not be removed (another owner's, a folder without write access)
    first_error: str = ""


# The folders Airflow writes in its log folder, besides one `dag_id=<dag>` per DAG's task logs.
AIRFLOW_LOGS = frozenset({"dag_processor", "dag_processor_manager", "scheduler", "triggerer"})


def log_folder(settings: Settings) -> Path:
    return airflow_home(settings) / "logs"  # AIRFLOW__LOGGING__BASE_LOG_FOLDER, as infra/airflow sets it


def prune_logs(folder: Path, before: float) -> Pruned:
    """Delete the files under `folder` last written before `before` (a Unix time), then the folders
    left empty that were as old before this pass (deleting in a folder makes it new): a folder a task
    has just made for its log is newer and stays. Links are removed as entries, never followed, and
    a `folder` that is itself a link is refused (HousekeepingFailed): its target is not Airflow's
    own. An entry that cannot be removed is counted and the pass goes on. Only Airflow's own
    folders in it are pruned (AIRFLOW_LOGS): `airflow.home` may be any folder (`~`, `/srv`), and
    its `logs` then held the operator's own files too."""
    if folder.is_symlink():
        raise HousekeepingFailed(f"{folder} is a link (to {os.readlink(folder)}): refusing to delete under it")
    walked = []  # top-down: each folder before what it holds
    for parent, dirs, names in os.walk(folder):
        if parent == str(folder):
            dirs[:] = [d for d in dirs if d in AIRFLOW_LOGS or d.startswith("dag_id=")]
            names = []  # a file here is no log of Airflow's
        walked.append((parent, list(dirs), names))
    ages = {os.path.join(parent, d): _mtime(os.path.join(parent, d)) for parent, dirs, _ in walked for d in dirs}
    files = size = folders = failed = 0
    first_error = ""
    for parent, dirs, names in reversed(walked):  # what a folder holds before the folder
        for name in names:
            path = os.path.join(parent, name)
            try:
                st = os.lstat(path)
                if st.st_mtime < before:
                    os.unlink(path)
                    files, size = files + 1, size + st.st_size
            except FileNotFoundError:
                pass  # removed meanwhile (a second housekeeping)
            except OSError as exc:
                failed, first_error = failed + 1, first_error or f"{path}: {exc.strerror}"
        for name in dirs:
            path = os.path.join(parent, name)
            if ages[path] >= before:
                continue
            try:
                if os.path.islink(path):
                    os.unlink(path)
                else:
                    os.rmdir(path)
                folders += 1
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno != errno.ENOTEMPTY:  # newer files inside, or ones that could not go (counted)
                    failed, first_error = failed + 1, first_error or f"{path}: {exc.strerror}"
    return Pruned(files, size, folders, failed, first_error)


def _mtime(path: str) -> float:
    try:
        return os.lstat(path).st_mtime
    except FileNotFoundError:
        return float("inf")  # gone meanwhile: nothing to remove


def clean_metadata(settings: Settings, before: datetime) -> None:
    """`airflow db clean` of the records older than `before`, unarchived, in CLEANED_TABLES, then
    `airflow db drop-archived`: `db clean` copies the rows it deletes into an `_airflow_deleted__*`
    table first and drops it after, so one it was killed or failed in between stays otherwise.
    One clean-up at a time on a state folder: `drop-archived` drops every such table, the one
    another clean-up is deleting through included, and that clean-up failed."""
    executable = str(check_installed(settings))
    with state_lock(settings.state_dir, "airflow-housekeeping.lock", "Airflow clean-up"):
        _clean_then_drop(settings, executable, before)


def _clean_then_drop(settings: Settings, executable: str, before: datetime) -> None:
    deadline = time.monotonic() + CLEAN_TIMEOUT_S
    _airflow(
        settings,
        deadline,
        "db clean",
        [
            executable,
            "db",
            "clean",
            "--clean-before-timestamp",
            before.isoformat(),
            "--tables",
            ",".join(CLEANED_TABLES),
            "--batch-size",
            str(CLEAN_BATCH_ROWS),
            "--skip-archive",
            "--yes",
        ],
    )
    _airflow(settings, deadline, "db drop-archived", [executable, "db", "drop-archived", "--yes"])


def _airflow(settings: Settings, deadline: float, what: str, command: list[str]) -> None:
    """Run an Airflow command until the monotonic `deadline`; it dies with this process's thread (a
    task's timeout killed `lambdactl`, and `db clean` ran on with no limit: the retry's clean-up then
    dropped the table it was deleting through)."""
    timeout_s = max(1.0, deadline - time.monotonic())
    try:
        done = subprocess.run(
            command,
            env=environment(settings),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            preexec_fn=dies_with_this_thread(),
        )
    except subprocess.TimeoutExpired as exc:
        raise HousekeepingFailed(f"`airflow {what}` did not end within {timeout_s:.0f} s") from exc
    output = f"{done.stdout}\n{done.stderr}"
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise HousekeepingFailed(f"`airflow {what}` failed (exit {done.returncode}): {tail}")
    failed = sorted(set(TABLE_FAILED.findall(output)))
    if failed:
        raise HousekeepingFailed(
            f"`airflow {what}` could not clean {', '.join(failed)} (the database busy?): run it again"
        )
