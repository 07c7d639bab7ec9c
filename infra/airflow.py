"""Airflow 3 for the platform: its environment, its launcher, and a small REST client.

Airflow lives in its own virtualenv (settings.airflow.venv, made by infra/setup.sh from
infra/airflow_env/requirements.lock) because its pins clash with the platform's. Its three
components (API server, scheduler, DAG processor) run as three programs of the supervisor, so one
that dies is restarted on its own (under `airflow standalone` a dead child stayed dead while its
parent ran on); no triggerer, as no task of the DAG defers (its sensor reschedules). SQLite in
AIRFLOW_HOME by default (any SQLAlchemy URL from settings), the LocalExecutor, the repository's
dags/ folder, and the simple auth manager with the password from settings. Its tasks call the
platform through `lambdactl` in the platform's virtualenv.

`python -m infra.airflow COMPONENT` (what `lambdactl up` runs, one program per component)
prepares AIRFLOW_HOME and execs that component. The API server's program first brings the
database schema up to date (`airflow db migrate`, idempotent); the others wait until it is
(`airflow db check-migrations`). docker-compose.yml runs the same four as four services.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from definitions.files import private_dir, refuse_untrusted, replace_text, write_private
from definitions.logs import configure_from
from definitions.section import REPO_ROOT, browser_url
from definitions.service_settings import DEFAULT_AIRFLOW_PASSWORD
from definitions.settings import Settings, process_settings, weak_password
from stores.airflow import base_url

log = logging.getLogger("lambda.airflow")

DAGS_FOLDER = REPO_ROOT / "dags"
PLUGINS_FOLDER = REPO_ROOT / "infra" / "airflow_plugins"  # the DAG's "Accuracy report" link


def airflow_home(settings: Settings) -> Path:
    return Path(settings.airflow.home) if settings.airflow.home else settings.state_dir / "airflow"


def environment(settings: Settings) -> dict[str, str]:
    """The environment Airflow and its tasks run with."""
    a = settings.airflow
    home = airflow_home(settings)
    database = a.database_url.get_secret_value() or f"sqlite:///{home / 'airflow.db'}"
    # None of the shell's own Airflow settings: one left there (say, all users admins) would apply
    # silently, beside or over the platform's.
    env = {name: value for name, value in os.environ.items() if not name.startswith("AIRFLOW__")}
    env.update(
        {
            "PATH": f"{a.venv / 'bin'}:{env.get('PATH', '')}",
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS_FOLDER),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": str(a.paused_at_creation),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(a.parallelism),
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(a.parallelism),
            "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{a.admin_user}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",  # a login, always
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base_url(settings)}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database,
            "AIRFLOW__API__HOST": a.host,
            "AIRFLOW__API__PORT": str(a.port),
            "AIRFLOW__API__BASE_URL": base_url(settings),
            "AIRFLOW__SCHEDULER__STANDALONE_DAG_PROCESSOR": "True",
            # Airflow's own verdict on its scheduler, as the platform's (stores.airflow); Airflow 3.1
            # has none to set for its DAG processor (2.1 heartbeats, 10.5 s).
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": str(a.heartbeat_stale_s),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            # The DAG's tasks call the platform's command line in the platform's virtualenv.
            "LAMBDA_PLATFORM_BIN": str(Path(sys.executable).parent),
            "LAMBDA_INGEST_BUCKET_S": str(settings.ingest_bucket_s),
            "LAMBDA_BATCH__INTERVAL_S": str(settings.batch.interval_s),
            "LAMBDA_BATCH__TASK_TIMEOUT_S": str(settings.batch.task_timeout_s),
            "LAMBDA_BATCH__COMPLETENESS_WAIT_S": str(settings.batch.completeness_wait_s),
            "LAMBDA_API_URL": browser_url(settings.api.host, settings.api.port, settings.api.public_url),
            "LAMBDA_VIEWS_FILE": str(views_file(settings)),
        }
    )
    return env


def views_file(settings: Settings) -> Path:
    """The declared views' names, for the DAG's trigger form (Airflow runs without the platform's packages)."""
    return airflow_home(settings) / "views.json"


# How many names no longer declared the views file keeps (the latest retired first).
RETIRED_KEPT = 100


def _retired_before(path: Path) -> list[str]:
    """The names the views file held (declared, then retired), whatever else it holds: none."""
    try:
        if not path.is_file() or path.stat().st_size > 1_048_576:
            return []
        written = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return []
    if not isinstance(written, dict):
        return []
    names: list[str] = []
    for key in ("views", "retired"):
        held = written.get(key)
        if isinstance(held, list):
            names += [n for n in held if isinstance(n, str) and n.isascii() and n.isidentifier()]
    return names


def write_declared_views(settings: Settings, names: Sequence[str]) -> None:
    """Write the declared views' names where the DAG reads them (at its next parse), in one step
    and under a temporary name of this writer's own (Airflow's components start at once). The
    names declared before and no longer are kept as `retired` (at most RETIRED_KEPT, the latest
    first): the DAG's enum accepts them, so a run naming a view removed since it was triggered
    reaches `lambdactl`, which refuses it naming why (the task's failure cause), where Airflow's
    own check of the params would fail the task with no cause."""
    path = views_file(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    declared = list(names)
    retired = [n for n in dict.fromkeys(_retired_before(path)) if n not in declared][:RETIRED_KEPT]
    replace_text(path, json.dumps({"views": declared, "retired": retired}))


def prepare_home(settings: Settings) -> None:
    """Airflow's home, and the declared views' names for the DAG's form. A view module that does
    not import (edited on disk, say) leaves the names last written: it stopped every component of
    Airflow, each start failing the same way."""
    from definitions.view_loading import load_views

    home = private_dir(airflow_home(settings))  # its database holds run confs and XComs
    # At each start, not only at `up` where it exists: one another user made first (outside the state
    # directory, after a reboot) holds the configuration and the code Airflow runs.
    refuse_untrusted(home, "airflow.home", "Airflow is not started from it", ancestors=True)
    try:
        names = load_views(settings).names()
    except Exception as exc:  # noqa: BLE001 - any failure of a view module's import
        log.error(
            "the declared views cannot be loaded (%s: %s): the DAG's form keeps the names written before",
            type(exc).__name__,
            exc,
        )
    else:
        write_declared_views(settings, names)
    passwords = home / "passwords.json"
    write_private(
        passwords, json.dumps({settings.airflow.admin_user: settings.airflow.admin_password.get_secret_value()})
    )


def check_installed(settings: Settings) -> Path:
    executable = settings.airflow.venv / "bin" / "airflow"
    if not executable.exists():
        raise FileNotFoundError(f"no Airflow in {settings.airflow.venv}: run `make setup` (infra/airflow_env/setup.sh)")
    return executable


# The components `python -m infra.airflow` runs, each as its own program (`airflow <component>`).
COMPONENTS = ("api-server", "scheduler", "dag-processor")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.airflow", description="run one of Airflow's components")
    parser.add_argument("component", nargs="?", default="api-server", choices=COMPONENTS)
    component = parser.parse_args(argv).component
    settings = process_settings(f"airflow {component}")
    configure_from("airflow" if component == "api-server" else f"airflow-{component}", settings)
    if (
        settings.environment != "development"
        and settings.airflow.admin_password.get_secret_value() == DEFAULT_AIRFLOW_PASSWORD
    ):
        log.error("refusing to start: set LAMBDA_AIRFLOW__ADMIN_PASSWORD outside development")
        return 2
    weak = weak_password(settings)
    if weak:
        log.error("refusing to start: %s", weak)
        return 2
    executable = check_installed(settings)
    try:
        prepare_home(settings)
    except ValueError as exc:  # refuse_untrusted: its home is not this user's alone
        log.error("refusing to start: %s", exc)
        return 2
    env = environment(settings)
    if component == "api-server":
        step = [str(executable), "db", "migrate"]
    else:  # the API server's program migrates; wait for it rather than race it
        step = [
            str(executable),
            "db",
            "check-migrations",
            "--migration-wait-timeout",
            str(int(settings.airflow.health_timeout_s)),
        ]
    done = subprocess.run(step, env=env, check=False)
    if done.returncode != 0:
        log.error("`airflow %s` failed (exit %d): see the lines above", " ".join(step[1:]), done.returncode)
        return 1
    log.info(
        "starting Airflow's %s (%s, home %s, dags %s)",
        component,
        base_url(settings),
        airflow_home(settings),
        DAGS_FOLDER,
    )
    # Every component shares AIRFLOW_HOME/logs on this machine, so the API server reads task logs from
    # there: no log-serving process beside the scheduler (about 130 MB).
    extra = ["--skip-serve-logs"] if component == "scheduler" else []
    os.execve(str(executable), [str(executable), component, *extra], env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
