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
import time
from pathlib import Path

import httpx

from definitions.files import write_private
from definitions.settings import DEFAULT_AIRFLOW_PASSWORD, REPO_ROOT, Settings, get_settings

log = logging.getLogger("lambda.airflow")

DAGS_FOLDER = REPO_ROOT / "dags"


def airflow_home(settings: Settings) -> Path:
    return Path(settings.airflow.home) if settings.airflow.home else settings.state_dir / "airflow"


def base_url(settings: Settings) -> str:
    return f"http://{settings.airflow.host}:{settings.airflow.port}"


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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    settings = get_settings()
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


class AirflowClient:
    """The bits of Airflow's REST API (v2) the platform uses."""

    def __init__(self, settings: Settings, timeout_s: float = 30) -> None:
        self.settings = settings
        self.http = httpx.Client(base_url=base_url(settings), timeout=timeout_s)
        self._token: str | None = None

    def close(self) -> None:
        self.http.close()

    def token(self) -> str:
        if self._token is None:
            a = self.settings.airflow
            resp = self.http.post(
                "/auth/token", json={"username": a.admin_user, "password": a.admin_password.get_secret_value()}
            )
            resp.raise_for_status()
            self._token = resp.json()["access_token"]
        return self._token

    def _call(self, method: str, path: str, **kwargs) -> dict:
        resp = self.http.request(method, path, headers={"Authorization": f"Bearer {self.token()}"}, **kwargs)
        if resp.status_code >= 400:
            raise RuntimeError(f"Airflow {method} {path}: {resp.status_code} {resp.text[:300]}")
        return resp.json() if resp.content else {}

    def dag(self, dag_id: str) -> dict:
        return self._call("GET", f"/api/v2/dags/{dag_id}")

    def unpause(self, dag_id: str) -> None:
        self._call("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": False})

    def pause(self, dag_id: str) -> None:
        self._call("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": True})

    def trigger(self, dag_id: str, conf: dict) -> str:
        run = self._call("POST", f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf})
        return run["dag_run_id"]

    def run(self, dag_id: str, run_id: str) -> dict:
        return self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        return self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]

    def wait(self, dag_id: str, run_id: str, timeout_s: float = 900) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            run = self.run(dag_id, run_id)
            if run["state"] in ("success", "failed"):
                return run
            if time.monotonic() > deadline:
                raise TimeoutError(f"DAG run {run_id} still {run['state']} after {timeout_s:.0f}s")
            time.sleep(3)


def health(settings: Settings) -> str:
    """Airflow's API answers, a token is granted, and the platform's DAG is parsed."""
    client = AirflowClient(settings, timeout_s=10)
    try:
        resp = client.http.get("/api/v2/monitor/health")
        resp.raise_for_status()
        states = {k: v.get("status") for k, v in resp.json().items() if isinstance(v, dict)}
        if states.get("metadatabase") != "healthy" or states.get("scheduler") != "healthy":
            raise RuntimeError(f"not healthy yet: {states}")
        dag = client.dag(settings.airflow.dag_id)
        return f"Airflow answers on {base_url(settings)}; {dag['dag_id']} parsed, {'paused' if dag['is_paused'] else 'active'}"
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())
