"""Airflow's REST API, as the platform uses it: trigger and follow runs of its DAG, and whether
Airflow answers. The one place the platform speaks to Airflow (infra.airflow starts it)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import httpx

from definitions.section import browser_url
from definitions.settings import Settings


def base_url(settings: Settings) -> str:
    return browser_url(settings.airflow.host, settings.airflow.port, "")  # every address: the loopback


class AirflowRefused(RuntimeError):
    """Airflow refused the request as asked (400 or 422), e.g. a run's params its DAG does not accept.
    `reason`: the first line of Airflow's own explanation (`detail`), at most 300 characters."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


def refusal_reason(resp: httpx.Response) -> str:
    """The first line of the `detail` of an Airflow error answer (its JSON schema dump left out)."""
    try:
        doc = resp.json()
    except ValueError:
        doc = resp.text
    detail = doc.get("detail") if isinstance(doc, dict) else doc
    if isinstance(detail, list):  # a validation error's list of {loc, msg, type}
        detail = "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail)
    elif isinstance(detail, dict):
        detail = str(detail.get("msg") or detail)
    lines = str(detail if detail is not None else resp.text).strip().splitlines()
    return lines[0][:300] if lines else ""


class AirflowConflict(RuntimeError):
    """Airflow answered 409: what the request would create exists already (e.g. a run of that id)."""


class AirflowTimeout(TimeoutError):
    """The client's deadline passed before Airflow answered everything asked."""


class AirflowClient:
    """The bits of Airflow's REST API (v2) the platform uses. `timeout_s` bounds each call;
    `deadline_s` (from now) bounds all of them: a call is cut at it and none is made after it."""

    def __init__(self, settings: Settings, timeout_s: float = 30, deadline_s: float | None = None) -> None:
        self.settings = settings
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s
        self.deadline = None if deadline_s is None else time.monotonic() + deadline_s
        self.http = httpx.Client(base_url=base_url(settings), timeout=timeout_s)
        self._token: str | None = None

    def _send(self, method: str, path: str, **kwargs) -> httpx.Response:
        """One call, within the deadline if there is one."""
        if self.deadline is None:
            return self.http.request(method, path, **kwargs)
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise AirflowTimeout(f"Airflow did not answer within {self.deadline_s:g} s")
        try:
            return self.http.request(method, path, timeout=min(self.timeout_s, left), **kwargs)
        except httpx.TimeoutException:
            if time.monotonic() >= self.deadline:
                raise AirflowTimeout(f"Airflow did not answer within {self.deadline_s:g} s") from None
            raise

    def close(self) -> None:
        self.http.close()

    def token(self) -> str:
        if self._token is None:
            a = self.settings.airflow
            resp = self._send(
                "POST", "/auth/token", json={"username": a.admin_user, "password": a.admin_password.get_secret_value()}
            )
            resp.raise_for_status()
            self._token = resp.json()["access_token"]
        return self._token

    def _call(self, method: str, path: str, headers: dict[str, str] | None = None, **kwargs) -> dict:
        headers = {**(headers or {}), "Authorization": f"Bearer {self.token()}"}
        resp = self._send(method, path, headers=headers, **kwargs)
        if resp.status_code in (400, 422):
            raise AirflowRefused(f"Airflow {method} {path}: {resp.status_code} {resp.text[:300]}", refusal_reason(resp))
        if resp.status_code == 409:
            raise AirflowConflict(f"Airflow {method} {path}: 409 {resp.text[:300]}")
        if resp.status_code >= 400:
            raise RuntimeError(f"Airflow {method} {path}: {resp.status_code} {resp.text[:300]}")
        return resp.json() if resp.content else {}

    def dag(self, dag_id: str) -> dict:
        return self._call("GET", f"/api/v2/dags/{dag_id}")

    def unpause(self, dag_id: str) -> None:
        self._call("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": False})

    def pause(self, dag_id: str) -> None:
        self._call("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": True})

    def trigger(self, dag_id: str, conf: dict, run_id: str | None = None) -> str:
        """Queue a run; `run_id` given: Airflow refuses it (AirflowConflict) if a run has that id."""
        body: dict = {"logical_date": None, "conf": conf}
        if run_id is not None:
            body["dag_run_id"] = run_id
        run = self._call("POST", f"/api/v2/dags/{dag_id}/dagRuns", json=body)
        return run["dag_run_id"]

    def latest_run(self, dag_id: str) -> dict | None:
        """The DAG's run created last, whatever its state (None: it has none)."""
        doc = self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns", params={"order_by": "-id", "limit": 1})
        return doc["dag_runs"][0] if doc["dag_runs"] else None

    def runs(self, dag_id: str, states: list[str]) -> list[dict]:
        """The DAG's runs in any of `states` (e.g. "queued", "running"), oldest first."""
        doc = self._call(
            "GET", f"/api/v2/dags/{dag_id}/dagRuns", params={"state": states, "order_by": "run_after", "limit": 100}
        )
        return doc["dag_runs"]

    def delete_run(self, dag_id: str, run_id: str) -> None:
        self._call("DELETE", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")

    def run(self, dag_id: str, run_id: str) -> dict:
        return self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        return self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        """A task try's log as Airflow's API serves it (what its UI shows), one line per event."""
        doc = self._call(
            "GET",
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            params={"full_content": "true"},
            headers={"Accept": "application/json"},
        )
        content = doc.get("content", "")
        if isinstance(content, list):
            return "\n".join(line.get("event", "") if isinstance(line, dict) else str(line) for line in content)
        return str(content)

    def wait(self, dag_id: str, run_id: str, timeout_s: float = 900) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            run = self.run(dag_id, run_id)
            if run["state"] in ("success", "failed"):
                return run
            if time.monotonic() > deadline:
                raise TimeoutError(f"DAG run {run_id} still {run['state']} after {timeout_s:.0f}s")
            time.sleep(1)


# Airflow's components, as its health route names them: the supervisor runs each as a program.
COMPONENTS = {"scheduler": "scheduler", "dag-processor": "dag_processor"}


def _monitor(client: AirflowClient) -> dict[str, dict]:
    resp = client.http.get("/api/v2/monitor/health")
    resp.raise_for_status()
    return {k: v for k, v in resp.json().items() if isinstance(v, dict)}


def health(settings: Settings) -> str:
    """Airflow's API server answers, its database is healthy, a token is granted, and the platform's
    DAG is parsed (the scheduler and the DAG processor have probes of their own)."""
    client = AirflowClient(settings, timeout_s=10)
    try:
        database = _monitor(client).get("metadatabase", {}).get("status")
        if database != "healthy":
            raise RuntimeError(f"Airflow's database is {database or 'not reported'}")
        dag = client.dag(settings.airflow.dag_id)
        return f"Airflow answers on {base_url(settings)}; {dag['dag_id']} parsed, {'paused' if dag['is_paused'] else 'active'}"
    finally:
        client.close()


def heartbeat_verdict(entry: dict, now: datetime, stale_s: float) -> tuple[bool, str]:
    """Whether a component whose entry of Airflow's health route is `entry` is alive at `now`: its
    last heartbeat is at most `stale_s` old. Airflow's own `status` is not what decides: Airflow 3.1
    stores each heartbeat one heartbeat late (ages of 5-10 s on an idle machine) and calls its DAG
    processor unhealthy past 10.5 s, so that status flapped whenever the machine was busy for half a
    second. Returns (alive, what the heartbeat was)."""
    beat = next((v for k, v in entry.items() if k.endswith("heartbeat")), None)
    if beat is None:
        return False, f"no heartbeat reported (Airflow says {entry.get('status') or 'nothing'})"
    try:
        at = datetime.fromisoformat(beat)
    except (TypeError, ValueError):
        return False, f"a heartbeat that is no time: {beat!r:.60}"
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    age = (now - at).total_seconds()
    detail = f"last heartbeat {beat}, {age:.0f} s ago"
    if age > stale_s:
        return False, f"{detail}: older than airflow.heartbeat_stale_s ({stale_s:g} s)"
    if age < -stale_s:  # alive forever, if believed, whatever became of the component
        return False, f"last heartbeat {beat}, {-age:.0f} s in the future: this host's and Airflow's clocks disagree"
    return True, detail


def component_health(settings: Settings, component: str) -> str:
    """One of Airflow's components is alive: its heartbeat, as Airflow's health route reports it (it
    is served by the API server, so this needs that too), is recent (`heartbeat_verdict`)."""
    key = COMPONENTS[component]
    client = AirflowClient(settings, timeout_s=10)
    try:
        entry = _monitor(client).get(key, {})
    finally:
        client.close()
    alive, detail = heartbeat_verdict(entry, datetime.now(UTC), settings.airflow.heartbeat_stale_s)
    if not alive:
        raise RuntimeError(f"Airflow's {component}: {detail}")
    return f"Airflow's {component} heartbeats ({detail})"
