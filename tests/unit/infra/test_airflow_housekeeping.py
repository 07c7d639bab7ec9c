"""Airflow's history is kept for `airflow.keep_history_days`: older task and DAG-processor logs are
deleted, and older run records leave its database through `airflow db clean`."""

from __future__ import annotations

import os
import stat
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from definitions.settings import Settings
from infra.airflow_housekeeping import CLEANED_TABLES, HousekeepingFailed, clean_metadata, prune_logs

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
OLD = (NOW - timedelta(days=40)).timestamp()
RECENT = (NOW - timedelta(days=2)).timestamp()


def _file(path, when: float, text: str = "x" * 100):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (when, when))
    return path


def _age_dirs(root, when: float) -> None:
    for folder, dirs, _ in os.walk(root, topdown=False):
        for d in dirs:
            os.utime(os.path.join(folder, d), (when, when))


def test_logs_older_than_the_horizon_go_and_newer_ones_stay(tmp_path):
    logs = tmp_path / "logs"
    old_run = _file(logs / "dag_id=d" / "run_id=old" / "task_id=t" / "attempt=1.log", OLD)
    new_run = _file(logs / "dag_id=d" / "run_id=new" / "task_id=t" / "attempt=1.log", RECENT)
    old_day = _file(logs / "dag_processor" / "2026-10-22" / "dags-folder" / "d.py.log", OLD)
    _age_dirs(logs, OLD)
    os.utime(new_run.parent, (RECENT, RECENT))
    pruned = prune_logs(logs, (NOW - timedelta(days=30)).timestamp())
    assert not old_run.exists() and not old_day.exists()
    assert new_run.read_text() == "x" * 100
    assert not (logs / "dag_id=d" / "run_id=old").exists(), "an emptied old folder goes too"
    assert not (logs / "dag_processor" / "2026-10-22").exists()
    assert (logs / "dag_processor").is_dir() or not (logs / "dag_processor").exists()
    assert logs.is_dir(), "the log folder itself stays"
    assert pruned.files == 2 and pruned.bytes == 200
    assert pruned.folders >= 5


def test_only_airflows_own_folders_are_pruned(tmp_path):
    """`airflow.home` may be any absolute folder (`$HOME`, `/srv`): every old file under its `logs`
    was deleted, the operator's own with Airflow's."""
    logs = tmp_path / "logs"
    mine = _file(logs / "backup-2026-01.tar", OLD)
    theirs = _file(logs / "nginx" / "access.log.9", OLD)
    task = _file(logs / "dag_id=d" / "run_id=old" / "task_id=t" / "attempt=1.log", OLD)
    _age_dirs(logs, OLD)
    pruned = prune_logs(logs, (NOW - timedelta(days=30)).timestamp())
    assert mine.exists() and theirs.exists(), "what is not Airflow's stays"
    assert not task.exists() and pruned.files == 1


def test_a_folder_a_task_just_made_stays_even_while_empty(tmp_path):
    """A task creates its log folder, then its file: removing the empty folder meanwhile would fail
    the task's logging. A folder is removed only when it too is older than the horizon."""
    logs = tmp_path / "logs"
    fresh = logs / "dag_id=d" / "run_id=now" / "task_id=t"
    fresh.mkdir(parents=True)
    _file(logs / "dag_id=d" / "run_id=old" / "task_id=t" / "attempt=1.log", OLD)
    _age_dirs(logs / "dag_id=d" / "run_id=old", OLD)
    os.utime(logs / "dag_id=d" / "run_id=old", (OLD, OLD))
    prune_logs(logs, (NOW - timedelta(days=30)).timestamp())
    assert fresh.is_dir()
    assert not (logs / "dag_id=d" / "run_id=old").exists()


def test_a_link_in_the_log_folder_is_not_followed(tmp_path):
    elsewhere = _file(tmp_path / "elsewhere" / "keep.txt", OLD)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "link").symlink_to(tmp_path / "elsewhere")
    os.utime(logs / "link", (OLD, OLD), follow_symlinks=False)
    prune_logs(logs, (NOW - timedelta(days=30)).timestamp())
    assert elsewhere.exists(), "what a link points to is never deleted"


def test_no_log_folder_is_nothing_to_prune(tmp_path):
    assert prune_logs(tmp_path / "absent", NOW.timestamp()).files == 0


def _fake_airflow(tmp_path, script: str):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    exe = venv / "bin" / "airflow"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    settings = Settings(state_dir=tmp_path / "state")
    return settings.model_copy(update={"airflow": settings.airflow.model_copy(update={"venv": venv})})


def test_metadata_is_cleaned_before_the_horizon_in_the_tables_that_clean_safely(tmp_path):
    settings = _fake_airflow(tmp_path, f'echo "$@" >> {tmp_path}/args\n')
    clean_metadata(settings, NOW - timedelta(days=30))
    clean, drop = (tmp_path / "args").read_text().splitlines()
    assert drop.split() == ["db", "drop-archived", "--yes"], "copies a killed clean-up left go too"
    args = clean.split()
    assert args[:2] == ["db", "clean"]
    assert args[args.index("--batch-size") + 1] == "1000", "the write lock is held a batch at a time"
    assert args[args.index("--clean-before-timestamp") + 1] == "2026-11-01T12:00:00+00:00"
    tables = args[args.index("--tables") + 1].split(",")
    assert tables == list(CLEANED_TABLES)
    # Airflow 3.1's clean-up of these two fails on a foreign key still referenced (apache/airflow#63703).
    assert "dag_version" not in tables and "dag" not in tables
    assert "--yes" in args and "--skip-archive" in args


def test_a_failed_clean_up_names_its_exit_and_last_words(tmp_path):
    settings = _fake_airflow(tmp_path, "echo 'database is locked' >&2\nexit 1\n")
    with pytest.raises(HousekeepingFailed, match=r"exit 1.*database is locked"):
        clean_metadata(settings, NOW - timedelta(days=30))


def test_a_table_airflow_could_not_clean_is_a_failure_though_it_exits_0(tmp_path):
    """`airflow db clean` logs a table whose clean-up failed (SQLite busy past its wait) as a warning,
    goes on and exits 0: the housekeeping said "cleaned" and its task was not retried."""
    warning = "[warning  ] Encountered error when attempting to clean table 'dag_run'. [airflow.utils.db_cleanup]"
    settings = _fake_airflow(tmp_path, f'echo "{warning}" >&2\nexit 0\n')
    with pytest.raises(HousekeepingFailed, match=r"could not clean dag_run"):
        clean_metadata(settings, NOW - timedelta(days=30))


def test_a_log_folder_that_is_a_link_is_refused(tmp_path):
    elsewhere = _file(tmp_path / "shared" / "old.log", OLD)
    (tmp_path / "logs").symlink_to(tmp_path / "shared")
    with pytest.raises(HousekeepingFailed, match="is a link"):
        prune_logs(tmp_path / "logs", NOW.timestamp())
    assert elsewhere.exists()


def test_an_entry_that_cannot_be_removed_is_counted_and_the_pass_goes_on(tmp_path, monkeypatch):
    """One file of another owner stopped the pass, every day, before Airflow's records were cleaned."""
    logs = tmp_path / "logs"
    locked = _file(logs / "dag_id=a_locked" / "old.log", OLD)
    later = _file(logs / "dag_id=b_open" / "old.log", OLD)
    real_unlink = os.unlink

    def unlink(path, *args, **kwargs):
        if str(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(path))
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    pruned = prune_logs(logs, NOW.timestamp())
    assert locked.exists() and not later.exists()
    assert pruned.failed == 1 and "old.log: Permission denied" in pruned.first_error
    assert (logs / "dag_id=a_locked").is_dir(), "its folder, not empty, stays without counting as a failure"


def test_history_is_kept_at_least_as_long_as_a_batch_run_can_last():
    """`airflow db clean` picks runs by their start, whatever their state: with keep_history_days=1
    a batch run whose sensor had waited a day lost its records while it ran."""
    from lambdactl.housekeeping import kept_history_s

    assert kept_history_s(Settings()) == 30 * 86_400
    short = Settings(airflow={"keep_history_days": 1})
    longest = short.batch.completeness_wait_s + 15 * short.batch.task_timeout_s
    assert kept_history_s(short) == longest + 86_400 > 86_400


def test_two_clean_ups_at_once_take_turns(tmp_path):
    """`airflow db drop-archived` drops every archive table, the one another `db clean` is deleting
    through included (and two started in one second name theirs alike): that one then failed. Each
    command of the fake notes when another is inside at the same time."""
    inside, overlaps = tmp_path / "inside", tmp_path / "overlaps"
    script = (
        f'mkdir {inside} 2>/dev/null || echo "$1 $2" >> {overlaps}\nsleep 0.4\nrmdir {inside} 2>/dev/null\nexit 0\n'
    )
    settings = _fake_airflow(tmp_path, script)
    with ThreadPoolExecutor(2) as pool:
        for done in [pool.submit(clean_metadata, settings, NOW - timedelta(days=30)) for _ in range(2)]:
            done.result()
    assert not overlaps.exists(), overlaps.read_text()


CLEAN_IN_A_CHILD = """
import sys
from datetime import UTC, datetime
from pathlib import Path
from definitions.settings import Settings
from infra.airflow_housekeeping import clean_metadata
venv = Path(sys.argv[1])
settings = Settings(state_dir=Path(sys.argv[2]))
settings = settings.model_copy(update={"airflow": settings.airflow.model_copy(update={"venv": venv})})
clean_metadata(settings, datetime(2026, 11, 1, tzinfo=UTC))
"""


def test_a_clean_up_whose_command_is_killed_ends_with_it(tmp_path):
    """The DAG task's timeout kills `lambdactl housekeeping`; its `airflow db clean` ran on, its time
    limit gone with it, beside the retry's (whose `db drop-archived` then dropped the table it was
    deleting through)."""
    import subprocess
    import sys

    from tests.support.polling import ended, wait_for

    pid_file = tmp_path / "airflow.pid"
    settings = _fake_airflow(tmp_path, f"echo $$ > {pid_file}\nexec sleep 300\n")
    command = subprocess.Popen(
        [sys.executable, "-c", CLEAN_IN_A_CHILD, str(settings.airflow.venv), str(settings.state_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    airflow = 0
    try:
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout_s=60, what="airflow db clean")
        airflow = int(pid_file.read_text())
        command.kill()
        command.wait(30)
        wait_for(lambda: ended(airflow), timeout_s=30, interval_s=0.2, what="airflow db clean ended with its command")
    finally:
        command.kill()
        if airflow:
            try:
                os.kill(airflow, 9)
            except OSError:
                pass
