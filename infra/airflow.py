"""Airflow 3 for the platform: its environment, its launcher, and a small REST client.

Airflow lives in its own virtualenv (settings.airflow.venv, made by infra/airflow/setup.sh from
infra/airflow/requirements.lock) because its pins clash with the platform's. It runs as
`airflow standalone` with SQLite in AIRFLOW_HOME by default (any SQLAlchemy URL from settings),
the repository's dags/ folder, and the simple auth manager with the password from settings.
Its tasks call the platform through `lambdactl` in the platform's virtualenv.

`python -m infra.airflow` (what `lambdactl up` runs) prepares AIRFLOW_HOME and execs Airflow.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from definitions.files import write_private
from definitions.logs import configure_from
from definitions.settings import DEFAULT_AIRFLOW_PASSWORD, REPO_ROOT, Settings, get_settings
from stores.airflow import base_url

log = logging.getLogger("lambda.airflow")

DAGS_FOLDER = REPO_ROOT / "dags"


def airflow_home(settings: Settings) -> Path:
    return Path(settings.airflow.home) if settings.airflow.home else settings.state_dir / "airflow"


def environment(settings: Settings) -> dict[str, str]:
    """The environment Airflow and its tasks run with."""
    a = settings.airflow
    home = airflow_home(settings)
    database = a.database_url.get_secret_value() or f"sqlite:///{home / 'airflow.db'}"
    env = dict(os.environ)
    env.update(
        {
            "PATH": f"{a.venv / 'bin'}:{env.get('PATH', '')}",
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__PARALLELISM": str(a.parallelism),
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(a.parallelism),
            "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{a.admin_user}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base_url(settings)}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database,
            "AIRFLOW__API__HOST": a.host,
            "AIRFLOW__API__PORT": str(a.port),
            "AIRFLOW__API__BASE_URL": base_url(settings),
            "AIRFLOW__SCHEDULER__STANDALONE_DAG_PROCESSOR": "True",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            # The DAG's tasks call the platform's command line in the platform's virtualenv.
            "LAMBDA_PLATFORM_BIN": str(Path(sys.executable).parent),
            "LAMBDA_INGEST_BUCKET_S": str(settings.ingest_bucket_s),
            "LAMBDA_BATCH__INTERVAL_S": str(settings.batch.interval_s),
            "LAMBDA_API_URL": f"http://{settings.api.host}:{settings.api.port}",
        }
    )
    return env


def prepare_home(settings: Settings) -> None:
    home = airflow_home(settings)
    home.mkdir(parents=True, exist_ok=True)
    passwords = home / "passwords.json"
    write_private(
        passwords, json.dumps({settings.airflow.admin_user: settings.airflow.admin_password.get_secret_value()})
    )


def check_installed(settings: Settings) -> Path:
    executable = settings.airflow.venv / "bin" / "airflow"
    if not executable.exists():
        raise FileNotFoundError(f"no Airflow in {settings.airflow.venv}: run `make setup` (infra/airflow/setup.sh)")
    return executable


def main() -> int:
    settings = get_settings()
    configure_from("airflow", settings)
    if (
        settings.environment != "development"
        and settings.airflow.admin_password.get_secret_value() == DEFAULT_AIRFLOW_PASSWORD
    ):
        log.error("refusing to start: set LAMBDA_AIRFLOW__ADMIN_PASSWORD outside development")
        return 2
    executable = check_installed(settings)
    prepare_home(settings)
    log.info("starting Airflow on %s (home %s, dags %s)", base_url(settings), airflow_home(settings), DAGS_FOLDER)
    os.execve(str(executable), [str(executable), "standalone"], environment(settings))
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
