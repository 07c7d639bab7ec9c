"""Airflow orchestration on the real stack: DAGs parse without touching a database; the batch DAG,
triggered through the platform's API (Airflow REST underneath), moves the pointer to the expected
cutoff with exact answers and a report; a run whose batch task fails leaves serving untouched."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from infra.airflow import DAGS_FOLDER, environment, views_file
from ingest.generator import GeneratorConfig
from stores.airflow import AirflowClient
from stores.batch_views import VersionStore
from tests.integration.api.test_end_to_end import wait_exact
from tests.support.cli import lambdactl
from tests.support.events import fresh_seed, send, wait_cutoff_past
from tests.support.polling import ended, wait_for

PARSE = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from airflow.models.dagbag import BundleDagBag
    # As Airflow's DAG processor reads the folder: on the path (the DAGs import lambda_platform), and
    # what .airflowignore names is not parsed.
    bag = BundleDagBag(dag_folder=sys.argv[1], bundle_path=Path(sys.argv[1]))
    print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()},
                      "dags": {d.dag_id: [t.task_id for t in d.tasks] for d in bag.dags.values()},
                      "schedule": str(bag.dags["lambda_batch_recompute"].schedule),
                      "views": bag.dags["lambda_batch_recompute"].params.get_param("views").schema,
                      "timeouts": {t.task_id: t.execution_timeout.total_seconds()
                                   for t in bag.dags["lambda_batch_recompute"].tasks},
                      "sensor_timeout": bag.dags["lambda_batch_recompute"].get_task("wait_for_completeness").timeout,
                      "housekeeping_schedule": str(bag.dags["lambda_housekeeping"].schedule),
                      "files": sorted(Path(f).name for f in bag.file_last_changed)}))
""")


@pytest.fixture(scope="module", autouse=True)
def paused_afterwards(settings):
    """Triggering unpauses the DAG; pause it again so its schedule does not run batches during other tests."""
    yield
    client = AirflowClient(settings)
    try:
        client.pause(settings.airflow.dag_id)
    except Exception:  # Airflow not up (the parse test runs without it): nothing to pause
        pass
    finally:
        client.close()


def api(settings) -> str:
    return f"http://{settings.api.host}:{settings.api.port}"


def token(settings) -> dict:
    """The admin routes' token (api.admin_token, else api.token)."""
    return {"Authorization": f"Bearer {settings.api.admin_secret()}"}


def in_airflow(settings, script: str, env: dict[str, str]) -> dict:
    """Run `script` (given the DAGs folder) in Airflow's virtualenv: the JSON of its last line."""
    done = subprocess.run(
        [str(settings.airflow.venv / "bin" / "python"), "-c", script, str(DAGS_FOLDER)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_dags_import_cleanly_without_a_database(settings, tmp_path):

    env = environment(settings)
    # A database that cannot exist: parsing must not need it.
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:////nonexistent/dir/airflow.db")
    # The trigger form offers the declared views, as the platform wrote them.
    (tmp_path / "views.json").write_text(json.dumps({"views": ["page_views", "clicks"], "retired": ["sessions"]}))
    env["LAMBDA_VIEWS_FILE"] = str(tmp_path / "views.json")
    # The DAG's limits are settings (batch.task_timeout_s, batch.completeness_wait_s), passed by infra/airflow.
    env.update(LAMBDA_BATCH__TASK_TIMEOUT_S="10800", LAMBDA_BATCH__COMPLETENESS_WAIT_S="5400")
    result = in_airflow(settings, PARSE, env)
    assert result["errors"] == {}
    assert result["dags"]["lambda_batch_recompute"] == [
        "wait_for_completeness",
        "recompute",
        "verify",
        "swap",
        "report",
        "clean_realtime",
    ]
    assert result["dags"]["lambda_housekeeping"] == ["housekeeping", "compact_master"]
    assert result["files"] == ["lambda_batch_recompute.py", "lambda_housekeeping.py"], "the shared module is not parsed"
    assert "@daily" in result["housekeeping_schedule"] or "0 0 * * *" in result["housekeeping_schedule"]
    assert "3600" in result["schedule"] or "1:00:00" in result["schedule"]
    assert result["views"]["type"] == "array"
    assert result["views"]["examples"] == ["page_views", "clicks"], result["views"]
    # Offered: the declared views. Accepted: those and the retired ones, which `lambdactl batch`
    # refuses naming why (a run triggered before its view was removed).
    assert result["views"]["items"]["enum"] == ["page_views", "clicks", "sessions"], result["views"]
    assert result["timeouts"]["recompute"] == 10_800 and result["timeouts"]["swap"] == 10_800, result["timeouts"]
    assert result["timeouts"]["wait_for_completeness"] == 120, "each poke: two minutes"
    assert result["sensor_timeout"] == 5_400


COMMAND_TIMEOUT = textwrap.dedent("""
    import json, sys, time
    from datetime import timedelta
    from types import SimpleNamespace
    sys.path.insert(0, sys.argv[1])
    import lambda_batch_recompute as dag_file
    import lambda_platform.commands as commands

    pushed = {}
    def context(limit):
        ti = SimpleNamespace(task=SimpleNamespace(execution_timeout=limit),
                             xcom_push=lambda key, value: pushed.update({key: value}))
        return lambda: {"ti": ti}

    commands.get_current_context = context(timedelta(hours=2))
    two_hours = commands.command_timeout_s()
    commands.get_current_context = context(timedelta(minutes=2))  # the sensor's poke
    poke = commands.command_timeout_s()
    commands.get_current_context = context(timedelta(seconds=2.4))
    started = time.monotonic()
    try:
        dag_file.lambdactl("batch", "--json")
        outcome = "returned"
    except dag_file.LambdactlError as exc:
        outcome = str(exc)
    print(json.dumps({"two_hours": two_hours, "poke": poke, "outcome": outcome, "took": time.monotonic() - started,
                      "cause": pushed.get(commands.FAILURE_CAUSE_KEY)}))
""")


def test_a_command_gets_the_tasks_own_time_and_a_cause_when_it_runs_out(settings, tmp_path):
    """A task's command may run as long as the task may (a batch over a large master dataset takes
    over an hour); one that runs out is stopped and named as the failure's cause."""
    fake = tmp_path / "bin" / "lambdactl"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexec sleep 120\n")
    fake.chmod(0o755)
    env = environment(settings)
    env.update(AIRFLOW_HOME=str(tmp_path), LAMBDA_PLATFORM_BIN=str(fake.parent))
    result = in_airflow(settings, COMMAND_TIMEOUT, env)
    assert 3_600 < result["two_hours"] < 7_200 and 60 <= result["poke"] < 120, result
    assert result["took"] < 60, result
    assert "did not finish within 2s" in result["cause"] and "execution_timeout" in result["cause"], result
    assert "lambdactl batch --json" in result["outcome"], result


ORPHAN = textwrap.dedent("""
    import json, os, sys
    from datetime import timedelta
    from types import SimpleNamespace
    sys.path.insert(0, sys.argv[1])
    import lambda_batch_recompute as dag_file
    import lambda_platform.commands as commands

    ti = SimpleNamespace(task=SimpleNamespace(execution_timeout=timedelta(hours=2)), xcom_push=lambda **_: None)
    commands.get_current_context = lambda: {"ti": ti}
    print(json.dumps({"task": os.getpid()}), flush=True)
    dag_file.lambdactl("batch", "--json")  # killed while it runs
""")


ORPHANED_AT_START = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, sys.argv[1])
    import lambda_batch_recompute as dag_file
    import lambda_platform.commands as commands

    child = os.fork()
    if child == 0:  # the command's process, whose task died before it could ask for the signal
        try:
            commands._end_with_the_task(os.getppid() + 1)()
        finally:
            os._exit(0)
    print(json.dumps({"code": os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])}))
""")


def test_a_command_whose_task_died_before_it_started_does_not_run(settings, tmp_path):
    """The parent-death signal is asked for in the command's process after the fork: a task that died
    in between sent none, and a batch or a swap ran on, unowned, after the UI said failed."""
    env = environment(settings)
    env.update(AIRFLOW_HOME=str(tmp_path))
    assert in_airflow(settings, ORPHANED_AT_START, env) == {"code": 1}


def sleeping_command(settings, tmp_path) -> tuple[dict[str, str], Path]:
    """(the environment of a task whose `lambdactl` writes its pid and sleeps, the pid's file)."""
    fake = tmp_path / "bin" / "lambdactl"
    fake.parent.mkdir()
    pid_file = tmp_path / "command.pid"
    fake.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 300\n")
    fake.chmod(0o755)
    env = environment(settings)
    env.update(AIRFLOW_HOME=str(tmp_path), LAMBDA_PLATFORM_BIN=str(fake.parent))
    return env, pid_file


def test_a_task_killed_from_outside_takes_its_command_with_it(settings, tmp_path):
    """Airflow ends a task ("mark failed", "clear", a missed heartbeat) by signalling the task's own
    process; its command (a batch's Spark driver, a swap) ran on beside the retry."""
    env, pid_file = sleeping_command(settings, tmp_path)
    task = subprocess.Popen(
        [str(settings.airflow.venv / "bin" / "python"), "-c", ORPHAN, str(DAGS_FOLDER)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout_s=120, what="the command started")
        command = int(pid_file.read_text())
        task.kill()  # SIGKILL: no handler of the task's runs
        task.wait(30)
        wait_for(lambda: ended(command), timeout_s=30, what="the command ended with its task")
    finally:
        task.kill()
        try:
            os.kill(int(pid_file.read_text()), 9)
        except (OSError, ValueError):
            pass


# Airflow's executor runs a supervisor that forks the task's process (a LocalExecutor worker's).
SUPERVISOR = textwrap.dedent("""
    import subprocess, sys
    subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]]).wait()
""")


def test_a_task_whose_supervisor_was_killed_takes_its_command_with_it(settings, tmp_path):
    """A supervisor killed (kill -9, the OOM killer) left the task's process orphaned and running, and
    with it the command: the scheduler retries the task once the heartbeats stop, and two batch
    drivers ran side by side for hours. Airflow's handler of SIGTERM in the task's process only
    calls on_kill, so the task asks for SIGKILL when its supervisor dies."""
    env, pid_file = sleeping_command(settings, tmp_path)
    python = str(settings.airflow.venv / "bin" / "python")
    supervisor = subprocess.Popen(
        [python, "-c", SUPERVISOR, ORPHAN, str(DAGS_FOLDER)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pids: list[int] = []
    try:
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout_s=120, what="the command started")
        command = int(pid_file.read_text())
        with open(f"/proc/{command}/stat") as stat:
            pids[:] = [command, int(stat.read().split(") ", 1)[1].split()[1])]  # the command, its task
        supervisor.kill()
        supervisor.wait(30)
        wait_for(lambda: all(map(ended, pids)), timeout_s=30, what="the task and its command ended with the supervisor")
    finally:
        supervisor.kill()
        for pid in pids:
            try:
                os.kill(pid, 9)
            except OSError:
                pass


BACKFILL = textwrap.dedent("""
    import json, sys
    from datetime import timedelta
    from types import SimpleNamespace
    sys.path.insert(0, sys.argv[1])
    import lambda_batch_recompute as dag_file
    import lambda_platform.commands as commands
    from airflow.exceptions import AirflowFailException
    from airflow.sdk.api.datamodels._generated import DagRunType

    pushed = {}
    outcome = {}
    for kind in (DagRunType.BACKFILL, DagRunType.MANUAL, DagRunType.SCHEDULED):
        ti = SimpleNamespace(xcom_push=lambda key, value: pushed.update({key: value}))
        commands.get_current_context = lambda: {"ti": ti, "dag_run": SimpleNamespace(run_type=kind)}
        try:
            dag_file.refuse_backfill()
            outcome[kind.value] = "runs"
        except AirflowFailException as exc:
            outcome[kind.value] = str(exc)
    params = dag_file.lambda_batch_recompute().params.get_param("cutoff").schema
    print(json.dumps({"outcome": outcome, "cause": pushed.get(commands.FAILURE_CAUSE_KEY), "cutoff": params}))
""")


BLANK_CUTOFF = textwrap.dedent("""
    import json, sys
    from types import SimpleNamespace
    sys.path.insert(0, sys.argv[1])
    import lambda_batch_recompute as dag_file
    import lambda_platform.commands as commands

    ran = []
    dag_file.lambdactl = lambda *args, **kwargs: ran.append(list(args)) or {}
    out = {}
    for given in ("  ", "", " 2026-03-01T10:00:00Z "):
        params = {"cutoff": given, "mode": "next_cutoff", "views": []}
        commands.get_current_context = lambda: {"ti": SimpleNamespace(), "params": params}
        ran.clear()
        dag_file.run_step("batch", "--no-swap")
        out[given] = {"cutoff": dag_file.given_cutoff(), "step": ran[0]}
    print(json.dumps(out))
""")


def test_a_blank_cutoff_in_the_form_is_the_last_complete_one(settings, tmp_path):
    """The form's pattern takes blanks and says "empty: the last complete one"; `--cutoff "  "` went
    to lambdactl, which refused it, and the run failed at once."""
    env = environment(settings)
    env.update(AIRFLOW_HOME=str(tmp_path))
    out = in_airflow(settings, BLANK_CUTOFF, env)
    assert out["  "] == out[""] == {"cutoff": "", "step": ["batch", "--no-swap", "--skip-if-overtaken"]}, out
    assert out[" 2026-03-01T10:00:00Z "] == {"cutoff": "2026-03-01T10:00:00Z", "step": ["batch", "--no-swap"]}, out


HOUSEKEEPING_COMMANDS = textwrap.dedent("""
    import json, sys
    from types import SimpleNamespace
    sys.path.insert(0, sys.argv[1])
    import lambda_housekeeping as dag_file
    import lambda_platform.commands as commands

    ran = []
    dag_file.lambdactl = lambda *args, **kwargs: ran.append(list(args)) or {}
    commands.get_current_context = lambda: {"ti": SimpleNamespace(), "dag_run": SimpleNamespace(conf={})}
    dag = dag_file.lambda_housekeeping()
    for task_id in ("housekeeping", "compact_master"):
        dag.get_task(task_id).python_callable()
    print(json.dumps(ran))
""")


def test_the_daily_compaction_does_not_wait_for_an_operators(settings, tmp_path):
    """Waiting on the compaction lock, the task held Airflow's only task slot (airflow.parallelism 1)
    for up to three hours of tries, every batch task behind it; refused, it is retried later."""
    env = environment(settings)
    env.update(AIRFLOW_HOME=str(tmp_path))
    assert in_airflow(settings, HOUSEKEEPING_COMMANDS, env) == [
        ["housekeeping", "--json"],
        ["compact-master", "--json", "--no-wait"],
    ]


EXIT_CODES = textwrap.dedent("""
    import json, sys
    from types import SimpleNamespace
    sys.path.insert(0, sys.argv[1])
    import lambda_batch_recompute as dag_file
    import lambda_platform.commands as commands
    from airflow.exceptions import AirflowFailException

    ti = SimpleNamespace(xcom_push=lambda key, value: None, task=SimpleNamespace(execution_timeout=None))
    commands.get_current_context = lambda: {"ti": ti}
    outcome = {}
    for code in ("1", "2", "a\\x00b", "json"):
        causes = []
        ti.xcom_push = lambda key, value: causes.append(value)
        try:
            dag_file.lambdactl("exit", code)
        except dag_file.LambdactlError as exc:
            outcome[code] = {"code": exc.code, "fails_at_once": isinstance(exc, AirflowFailException), "cause": causes}
    long = []  # a run naming many views: its command alone was longer than the cause kept
    ti.xcom_push = lambda key, value: long.append(value)
    try:
        dag_file.lambdactl("exit", "2", "--views", ",".join(["v" * 99] * 30))
    except dag_file.LambdactlError:
        pass
    print(json.dumps({"outcome": outcome, "long": long}))
""")


def test_a_refusal_fails_its_task_at_once_and_other_failures_are_retried(settings, tmp_path):
    """Exit 2 is a refusal the same command meets again (behind what serves, the pointer moved, the
    grace over, an unknown view): each of a task's retries failed the same way, and a run's clear
    failure came minutes later. Exit 1 (a store that did not answer) may pass on a retry."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "lambdactl"  # exits with the code it is given, as lambdactl refuses or fails
    fake.write_text(
        '#!/bin/sh\ncase "$2" in json) echo "{not json"; exit 0;; esac\n'
        'echo "lambdactl: refused or failed" >&2\nexit "$2"\n'
    )
    fake.chmod(0o755)
    env = environment(settings)
    env.update(AIRFLOW_HOME=str(tmp_path), LAMBDA_PLATFORM_BIN=str(bin_dir))
    both = in_airflow(settings, EXIT_CODES, env)
    result = both["outcome"]
    causes = {code: outcome.pop("cause") for code, outcome in result.items()}
    assert both["long"] and both["long"][0].endswith("exited 2: lambdactl: refused or failed"), both["long"]
    assert len(both["long"][0]) < 300, both["long"]
    assert result == {
        "1": {"code": 1, "fails_at_once": False},
        "2": {"code": 2, "fails_at_once": True},
        # A NUL byte in a run's conf: ValueError from subprocess, once a bare traceback retried twice.
        "a\x00b": {"code": -1, "fails_at_once": True},
        "json": {"code": 0, "fails_at_once": False},
    }, result
    assert "could not be started: embedded null byte" in causes["a\x00b"][0], causes
    assert "printed a line that is no JSON object: {not json" in causes["json"][0], causes


OVERTAKEN = textwrap.dedent("""
    import json, sys
    from types import SimpleNamespace
    sys.path.insert(0, sys.argv[1])
    import lambda_batch_recompute as dag_file
    import lambda_platform.commands as commands
    from airflow.exceptions import AirflowFailException, AirflowSkipException

    ti = SimpleNamespace(xcom_push=lambda key, value: None, task=SimpleNamespace(execution_timeout=None))
    dag = dag_file.lambda_batch_recompute()
    steps = {  # the DAG's own tasks, as its worker calls them
        "recompute": lambda: dag.get_task("recompute").python_callable({"cutoff": "2026-11-18T11:00:00Z"}),
        "swap": lambda: dag.get_task("swap").python_callable({"version": 12}),
    }
    outcome = {}
    for name, params in (
        ("planned", {"mode": "next_cutoff", "cutoff": "", "views": []}),
        ("cutoff given", {"mode": "next_cutoff", "cutoff": "2026-11-18T11:00:00Z", "views": []}),
        ("full recompute", {"mode": "full_recompute", "cutoff": "", "views": []}),
    ):
        commands.get_current_context = lambda: {"ti": ti, "params": params}
        for step, call in steps.items():
            try:
                call()
                outcome[f"{name}, {step}"] = "ran"
            except AirflowSkipException as exc:
                outcome[f"{name}, {step}"] = {"skipped": str(exc)}
            except AirflowFailException as exc:
                outcome[f"{name}, {step}"] = {"failed": str(exc).splitlines()[-1]}
    print(json.dumps(outcome))
""")


def test_a_run_overtaken_by_a_run_beside_it_skips_unless_its_cutoff_or_mode_was_asked_for(settings, tmp_path):
    """An operator's `lambdactl batch` that swaps past a DAG run's planned cutoff left the run failed
    (red in the UI) though nothing was wrong: now its step is skipped, naming why. A cutoff or a full
    recompute the user asked for still fails: what was asked for did not happen. The stand-in
    lambdactl answers as the real one does (tests/unit/batch/test_overtaken.py)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "lambdactl"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in *--skip-if-overtaken*) echo "lambdactl: nothing to do: a run beside this one moved '
        'serving past its cutoff" >&2; exit 3;; esac\n'
        'echo "lambdactl: batch refused: behind what serves" >&2\nexit 2\n'
    )
    fake.chmod(0o755)
    env = environment(settings)
    env.update(AIRFLOW_HOME=str(tmp_path), LAMBDA_PLATFORM_BIN=str(bin_dir))
    result = in_airflow(settings, OVERTAKEN, env)
    for step in ("recompute", "swap"):
        assert "a run beside this one moved serving past its cutoff" in result[f"planned, {step}"]["skipped"], result
        assert "behind what serves" in result[f"cutoff given, {step}"]["failed"], result
        assert "behind what serves" in result[f"full recompute, {step}"]["failed"], result


UNDECLARED = textwrap.dedent("""
    import json, sys
    from types import SimpleNamespace
    sys.path.insert(0, sys.argv[1])
    import lambda_batch_recompute as dag_file
    import lambda_platform.commands as commands
    from airflow.exceptions import AirflowFailException

    pushed = []
    ti = SimpleNamespace(xcom_push=lambda key, value: pushed.append(value))
    outcome = {}
    for name, conf in (
        ("typo", {"mode": "full_recompute", "view": ["page_views"]}),
        ("declared", {"mode": "next_cutoff", "cutoff": "", "views": []}),
        ("none", None),
    ):
        commands.get_current_context = lambda: {"ti": ti, "dag_run": SimpleNamespace(conf=conf)}
        try:
            dag_file.refuse_undeclared_conf(dag_file.PARAMS)
            outcome[name] = "runs"
        except AirflowFailException as exc:
            outcome[name] = str(exc)
    cutoff = dag_file.lambda_batch_recompute().params.get_param("cutoff")
    taken = {}
    for value in ("--force", "-v", "--", "", " ", "2026-11-18T11:00:00Z", " 2026-11-18T11:00:00Z"):
        try:
            cutoff.resolve(value)
            taken[value] = True
        except Exception:
            taken[value] = False
    print(json.dumps({"outcome": outcome, "causes": pushed, "taken": taken}))
""")


def test_a_conf_key_the_dag_does_not_take_fails_the_run_naming_it_and_a_cutoff_is_no_option(settings, tmp_path):
    """{"view": [...]} (for "views") was passed over: every view was recomputed. A cutoff of "--force"
    reached lambdactl's command line, which read it as an option."""
    env = environment(settings)
    env.update(AIRFLOW_HOME=str(tmp_path))
    result = in_airflow(settings, UNDECLARED, env)
    assert result["outcome"]["declared"] == result["outcome"]["none"] == "runs", result
    assert result["outcome"]["typo"].startswith("the run's conf names view: not a parameter of this DAG"), result
    assert result["causes"] == [result["outcome"]["typo"]], "the UI shows why"
    assert result["taken"] == {
        "--force": False,
        "-v": False,
        "--": False,
        "": True,
        " ": True,
        "2026-11-18T11:00:00Z": True,
        " 2026-11-18T11:00:00Z": True,
    }, result["taken"]


HOUSEKEEPING = textwrap.dedent("""
    import json, sys
    from types import SimpleNamespace
    sys.path.insert(0, sys.argv[1])
    import lambda_housekeeping as dag_file
    import lambda_platform.commands as commands
    from airflow.exceptions import AirflowFailException

    dag = dag_file.lambda_housekeeping()
    causes = []
    ti = SimpleNamespace(xcom_push=lambda key, value: causes.append((key, value)),
                         task=SimpleNamespace(execution_timeout=None))
    outcome = {}
    for name, conf in (("no conf", None), ("a conf", {"keep_days": 3})):
        for task_id in ("housekeeping", "compact_master"):
            commands.get_current_context = lambda: {"ti": ti, "dag_run": SimpleNamespace(conf=conf)}
            try:
                dag.get_task(task_id).python_callable()
                outcome[f"{name}, {task_id}"] = "returned"
            except Exception as exc:
                outcome[f"{name}, {task_id}"] = {"fails_at_once": isinstance(exc, AirflowFailException),
                                                 "said": str(exc).strip().splitlines()[-1]}
    print(json.dumps({"outcome": outcome, "causes": causes, "key": commands.FAILURE_CAUSE_KEY}))
""")


def test_a_failed_housekeeping_task_names_its_cause_and_a_conf_is_refused(settings, tmp_path):
    """The housekeeping DAG's tasks ran their commands as bash: a failure's reason was only in the
    log, and a run's conf (a parameter it does not take) was passed over."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "lambdactl"
    fake.write_text(  # the compaction refuses (another holds its lease): retried like any failure, as it passes
        '#!/bin/sh\ncase "$1" in compact-master) echo "lambdactl: compact-master: the lease is held" >&2; exit 2;; esac\n'
        'echo "lambdactl: $1: the database is locked" >&2\nexit 1\n'
    )
    fake.chmod(0o755)
    env = environment(settings)
    env.update(AIRFLOW_HOME=str(tmp_path), LAMBDA_PLATFORM_BIN=str(bin_dir))
    result = in_airflow(settings, HOUSEKEEPING, env)
    outcome = result["outcome"]
    said = {"housekeeping": "the database is locked", "compact_master": "the lease is held"}
    for task_id in ("housekeeping", "compact_master"):
        failed = outcome[f"no conf, {task_id}"]
        assert failed == {
            "fails_at_once": False,
            "said": f"lambdactl: {task_id.replace('_', '-')}: {said[task_id]}",
        }, outcome
        refused = outcome[f"a conf, {task_id}"]
        assert refused["fails_at_once"], outcome
        assert refused["said"].startswith("the run's conf names keep_days: not a parameter of this DAG"), outcome
    causes = [value for key, value in result["causes"] if key == result["key"]]
    assert causes[0] == "lambdactl housekeeping --json exited 1: lambdactl: housekeeping: the database is locked", (
        causes
    )
    assert causes[1] == (
        "lambdactl compact-master --json --no-wait exited 2: lambdactl: compact-master: the lease is held"
    ), causes
    assert "keep_days" in causes[2] and "keep_days" in causes[3] and len(causes) == 4, "the UI shows why"


def test_a_backfill_is_refused_and_a_cutoff_is_at_most_an_iso_times_length(settings, tmp_path):
    """Every run plans the latest cutoff whatever its logical date: a backfill's runs (run beside
    other runs) each recomputed the same cutoff, and all but one failed their swap."""
    env = environment(settings)
    env.update(AIRFLOW_HOME=str(tmp_path))
    result = in_airflow(settings, BACKFILL, env)
    assert result["outcome"]["manual"] == result["outcome"]["scheduled"] == "runs", result
    assert "backfill is refused" in result["outcome"]["backfill"], result
    assert "backfill is refused" in result["cause"], "the UI shows why"
    assert result["cutoff"]["maxLength"] == 40, result["cutoff"]


def trigger(settings, conf: dict) -> str:
    """Trigger a run through the platform's API, the DAG unpaused first (the API keeps a pause)."""
    client = AirflowClient(settings)
    try:
        client.unpause(settings.airflow.dag_id)
    finally:
        client.close()
    resp = httpx.post(f"{api(settings)}/api/v1/admin/recompute", json=conf, headers=token(settings), timeout=60)
    assert resp.status_code == 202, resp.text
    return resp.json()["dag_run_id"]


def run_to_the_end(settings, conf: dict, timeout_s: float, through_api: bool = True) -> tuple[dict, dict[str, str]]:
    """Trigger the DAG (through the platform's API, or Airflow's own) and wait until the run ends:
    (run, {task id: state})."""
    client = AirflowClient(settings)
    if through_api:
        run_id = trigger(settings, conf)
    else:
        client.unpause(settings.airflow.dag_id)
        run_id = client.trigger(settings.airflow.dag_id, {"mode": "next_cutoff", "cutoff": "", "views": [], **conf})
    try:
        run = client.wait(settings.airflow.dag_id, run_id, timeout_s=timeout_s)
        return run, {t["task_id"]: t["state"] for t in client.task_instances(settings.airflow.dag_id, run_id)}
    finally:
        client.close()


def active_runs(settings) -> list[dict]:
    """The DAG's runs that are queued or running, through Airflow's API."""
    client = AirflowClient(settings)
    try:
        runs = client._call(
            "GET", f"/api/v2/dags/{settings.airflow.dag_id}/dagRuns", params={"state": ["queued", "running"]}
        )
        return runs["dag_runs"]
    finally:
        client.close()


def scheduled_run_done(settings) -> bool:
    """The DAG unpaused, no scheduled run due (the scheduler has made the one that was) and none
    queued or running."""
    from datetime import UTC, datetime

    client = AirflowClient(settings)
    try:
        client.unpause(settings.airflow.dag_id)
        due = client.dag(settings.airflow.dag_id).get("next_dagrun_run_after")
    finally:
        client.close()
    later = due is not None and datetime.fromisoformat(due) > datetime.now(UTC)
    return later and not active_runs(settings)


def run_watching(settings, conf: dict, task_id: str, timeout_s: float = 1_200) -> tuple[dict, dict[str, str], list]:
    """Trigger the DAG through the API and poll the run until it ends: (run, {task id: state}, the
    states `task_id` went through, in order)."""
    run_id = trigger(settings, conf)
    client = AirflowClient(settings)
    seen: list = []
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            states = {t["task_id"]: t["state"] for t in client.task_instances(settings.airflow.dag_id, run_id)}
            if not seen or seen[-1] != states.get(task_id):
                seen.append(states.get(task_id))
            run = client.run(settings.airflow.dag_id, run_id)
            if run["state"] in ("success", "failed"):
                final = client.task_instances(settings.airflow.dag_id, run_id)
                return run, {t["task_id"]: t["state"] for t in final}, seen
            assert time.monotonic() < deadline, f"run {run_id} still {run['state']} after {timeout_s:.0f}s: {states}"
            time.sleep(1)
    finally:
        client.close()


def test_recompute_needs_the_token(settings, stack):
    assert httpx.post(f"{api(settings)}/api/v1/admin/recompute", json={}, timeout=30).status_code == 401


def test_recompute_keeps_a_pause_and_queues_no_second_waiting_run(settings, stack):
    """Each request unpaused the DAG (ending an operator's maintenance pause, its schedule running
    again) and queued one more run: a loop of requests queued a day of full recomputations."""
    dag_id = settings.airflow.dag_id
    client = AirflowClient(settings)
    try:
        client.pause(dag_id)
        post = lambda: httpx.post(  # noqa: E731
            f"{api(settings)}/api/v1/admin/recompute", json={}, headers=token(settings), timeout=60
        )
        paused = post()
        assert paused.status_code == 409 and "paused" in paused.json()["detail"], paused.text
        assert client.dag(dag_id)["is_paused"] and not client.runs(dag_id, ["queued"])
        # A run that waits (the DAG is paused, so it stays queued): no second one is queued.
        waiting = client.trigger(dag_id, {"mode": "next_cutoff", "cutoff": "", "views": []})
        try:
            again = post()
            assert again.status_code == 409 and waiting in again.json()["detail"], again.text
            assert [r["dag_run_id"] for r in client.runs(dag_id, ["queued"])] == [waiting]
        finally:
            client.delete_run(dag_id, waiting)
        assert client.dag(dag_id)["is_paused"]
    finally:
        client.close()


def test_requests_at_the_same_instant_do_not_each_queue_a_run(settings, stack):
    """Six requests at once each passed the check that no run waits and each queued a run (seen on
    the real Airflow). A run of the DAG is running first, so the runs queued stay queued
    (max_active_runs=1) for the whole burst."""
    dag_id = settings.airflow.dag_id
    wait_for(lambda: scheduled_run_done(settings), "the DAG's due scheduled run to finish", timeout_s=900, interval_s=2)
    client = AirflowClient(settings)
    bucket = settings.ingest_bucket_s
    ahead_s = (int(time.time()) // bucket + max(2, 900 // bucket)) * bucket  # its sensor waits until stopped
    cutoff = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ahead_s))
    blocker = client.trigger(dag_id, {"mode": "next_cutoff", "cutoff": cutoff, "views": []})
    started: list[str] = []
    try:
        wait_for(lambda: client.run(dag_id, blocker)["state"] == "running", "a run to be running", 300, 1)
        start = threading.Barrier(6)

        def post(_: int) -> httpx.Response:
            start.wait()
            return httpx.post(f"{api(settings)}/api/v1/admin/recompute", json={}, headers=token(settings), timeout=60)

        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(post, range(6)))
        started = [r.json()["dag_run_id"] for r in answers if r.status_code == 202]
        # One request at a time triggers on the API's host; before that, all six were queued (and
        # with the run named after the latest one alone, two were: Airflow's SQLite-backed API
        # answered two simultaneous reads of the latest run differently).
        assert len(started) == 1, [(r.status_code, r.text[:200]) for r in answers]
        assert all(r.status_code in (202, 409) for r in answers), [r.text[:200] for r in answers]
        queued = [r["dag_run_id"] for r in client.runs(dag_id, ["queued"])]
        assert set(queued) <= set(started), f"runs queued by the burst: {queued}, accepted: {started}"
    finally:
        client.pause(dag_id)
        for run_id in [*started, blocker]:
            client._call("PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}", json={"state": "failed"})
            client.delete_run(dag_id, run_id)
        client.close()


def test_triggered_run_moves_the_pointer_with_exact_answers_and_a_report(settings, stack):
    sent = send(
        settings,
        GeneratorConfig(
            seed=fresh_seed(),
            count=1_500,
            pages=15,
            url_prefix=f"/af-{uuid.uuid4().hex[:8]}",
            late_fraction=0.1,
            late_min_s=3_600,
            late_max_s=20 * 3_600,
            duplicate_fraction=0.05,
        ),
    )
    # Unpausing the DAG starts the scheduled run that is due, and runs go one at a time: let it
    # finish, or this run would start only once the archiver had covered the cutoff below.
    wait_for(lambda: scheduled_run_done(settings), "the DAG's due scheduled run to finish", timeout_s=900, interval_s=2)
    covered = wait_cutoff_past(settings, sent)
    before = VersionStore(settings).pointer()
    # A cutoff two ingest buckets, and at least a minute, beyond the covered cutoff: the run's
    # sensor waits for the archiver, rescheduling itself between pokes instead of holding a worker
    # (its first poke comes after the trigger, the scheduling and the task's start: 2-5 s measured).
    ahead_ms = covered + max(2, -(-60 // settings.ingest_bucket_s)) * settings.ingest_bucket_s * 1000
    ahead = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ahead_ms / 1000))

    run, states, seen = run_watching(settings, {"mode": "next_cutoff", "cutoff": ahead}, "wait_for_completeness")
    assert run["state"] == "success", states
    assert set(states.values()) == {"success"}, states
    assert "up_for_reschedule" in seen, f"the sensor never rescheduled itself: {seen}"

    after = VersionStore(settings).pointer()
    assert before is None or after.version > before.version
    assert after.cutoff_ms == ahead_ms > max(r.ingest_time_ms for r in sent)
    wait_exact(settings, sent)
    reports = httpx.get(f"{api(settings)}/api/v1/reports", timeout=30).json()["reports"]
    mine = [
        r
        for r in reports
        if r.get("window")
        and r["window"]["end"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(after.cutoff_ms / 1000))
    ]
    assert mine, "the run built the accuracy report of the window it absorbed"
    assert httpx.get(f"{api(settings)}{mine[0]['html']}", timeout=30).status_code == 200
    # The run links its report: the report task's "Accuracy report" extra link, as the UI reads it.
    client = AirflowClient(settings)
    dag_id, run_id = settings.airflow.dag_id, run["dag_run_id"]
    try:
        links = client._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/report/links")
        # The sensor's history, as the UI shows it: its one try (a reschedule is no retry), whose log
        # has a line for each time it gave its worker back.
        sensor = client._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/wait_for_completeness")
        sensor_log = client.task_log(dag_id, run_id, "wait_for_completeness", sensor["try_number"])
    finally:
        client.close()
    assert links["extra_links"]["Accuracy report"] == f"{api(settings)}/api/v1/reports/{mine[0]['id']}/html", links
    assert sensor["try_number"] == 1, sensor
    assert sensor_log.count("marking task as UP_FOR_RESCHEDULE") >= 1, sensor_log[-3000:]


def offered_views(client: AirflowClient, dag_id: str) -> tuple[list[str], list[str]]:
    """The views the DAG's trigger form offers, and those it accepts, as Airflow parsed them last."""
    params = client._call("GET", f"/api/v2/dags/{dag_id}/details").get("params") or {}
    schema = (params.get("views") or {}).get("schema") or {}
    return list(schema.get("examples") or []), list((schema.get("items") or {}).get("enum") or [])


@contextmanager
def offered(settings, names: list[str] | None, retired: tuple[str, ...] = ()):
    """The DAG offers `names` (None: the declared ones) and accepts those and `retired` (as if the
    declared views changed and the DAG was parsed before `lambdactl batch` saw the change); as it was
    afterwards."""
    path = views_file(settings)
    saved = path.read_text()
    before = json.loads(saved)
    names = before["views"] if names is None else names
    client = AirflowClient(settings)
    try:
        path.write_text(json.dumps({"views": names, "retired": list(retired)}))
        wait_for(
            lambda: offered_views(client, settings.airflow.dag_id) == (names, names + list(retired)),
            f"the DAG to offer {names}",
            240,
            1,
        )
        yield
    finally:
        path.write_text(saved)
        again = (before["views"], before["views"] + [n for n in before.get("retired", []) if n not in before["views"]])
        wait_for(lambda: offered_views(client, settings.airflow.dag_id) == again, f"the DAG to offer {again}", 240, 1)
        client.close()


def test_airflow_refuses_a_run_naming_a_view_its_dag_does_not_offer(settings, stack):
    client = AirflowClient(settings)
    try:
        assert "page_views" in offered_views(client, settings.airflow.dag_id)[0]
        with pytest.raises(RuntimeError, match=r"400.*no_such_view"):
            client.trigger(settings.airflow.dag_id, {"mode": "full_recompute", "cutoff": "", "views": ["no_such_view"]})
        # A declared view the DAG does not offer yet (added since its last parse): the platform's API
        # accepts the request, Airflow refuses it, and the API says to try again, not that Airflow failed.
        with offered(settings, ["page_views"]):
            late = httpx.post(
                f"{api(settings)}/api/v1/admin/recompute",
                json={"views": ["unique_visitors"]},
                headers=token(settings),
                timeout=60,
            )
        assert late.status_code == 409, late.text
        assert "try again shortly" in late.json()["detail"] and "Traceback" not in late.text, late.text
    finally:
        client.close()


def test_a_failing_batch_task_leaves_serving_where_it_was(settings, stack):
    before = VersionStore(settings).pointer()
    # Straight to Airflow: the platform's API refuses an undeclared view before Airflow is asked.
    # Airflow accepts a retired one (its run may have been triggered before the view was removed,
    # and Airflow checks the params again at each task's start, where a refusal has no cause).
    with offered(settings, None, retired=("no_such_view",)):
        run, states = run_to_the_end(
            settings, {"mode": "full_recompute", "views": ["no_such_view"]}, timeout_s=900, through_api=False
        )
    assert run["state"] == "failed"
    assert states["recompute"] == "failed" and states["swap"] in ("upstream_failed", None)
    assert VersionStore(settings).pointer() == before
    # The cause can be read where Airflow's UI reads it: the failed task's log, through its API.
    client = AirflowClient(settings)
    try:
        wait_for(
            lambda: "no_such_view" in client.task_log(settings.airflow.dag_id, run["dag_run_id"], "recompute"),
            "the failed task's log, read through Airflow's API, to name the unknown view",
            timeout_s=120,
            interval_s=2,
        )
        # ... and without the log: the failed task's `failure_cause` XCom, shown in the UI's XCom tab.
        cause = client._call(
            "GET",
            f"/api/v2/dags/{settings.airflow.dag_id}/dagRuns/{run['dag_run_id']}/taskInstances/recompute"
            "/xcomEntries/failure_cause",
        )
        assert "no_such_view" in str(cause.get("value")) and "lambdactl batch" in str(cause.get("value")), cause
    finally:
        client.close()


def test_a_manual_run_beside_a_dag_run_loses_the_swap_and_changes_nothing(settings, stack):
    """An operator's `lambdactl batch --no-swap` and a DAG run read the same pointer; the DAG swaps
    first. The manual swap is then refused naming why, the pointer stays where the DAG put it, and
    answers stay exact."""
    sent = send(
        settings, GeneratorConfig(seed=fresh_seed(), count=600, pages=8, url_prefix=f"/mix-{uuid.uuid4().hex[:8]}")
    )
    wait_cutoff_past(settings, sent)
    manual = lambdactl(settings, "batch", "--views", "page_views", "--force", "--no-swap", "--json")
    assert manual.returncode == 0, manual.stderr[-2000:]
    manual_version = json.loads(manual.stdout.strip().splitlines()[-1])["version"]

    run, states = run_to_the_end(settings, {"mode": "full_recompute", "views": ["page_views"]}, timeout_s=1_200)
    assert run["state"] == "success", states
    store = VersionStore(settings)
    after_dag = store.pointer()
    assert after_dag.entry("page_views").version > manual_version, "the DAG's run serves page_views"

    late = lambdactl(settings, "batch", "--swap", str(manual_version))
    assert late.returncode == 2, late.stderr[-2000:]
    assert "the pointer moved since this run read it" in late.stderr
    # As the DAG's own steps ask (their cutoff planned): the run beside it overtook this one
    overtaken = lambdactl(settings, "batch", "--swap", str(manual_version), "--skip-if-overtaken")
    assert overtaken.returncode == 3, overtaken.stderr[-2000:]
    assert "nothing to do: a run beside this one" in overtaken.stderr, overtaken.stderr[-2000:]
    assert store.pointer() == after_dag, "the refused swaps changed nothing"
    wait_exact(settings, sent)
