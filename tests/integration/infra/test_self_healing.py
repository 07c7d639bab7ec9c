"""On the real stack: kill -9 of the API, the speed layer and the archiver, one at a time, with
nobody running `lambdactl up`: each is running again by itself within 30 s and healthy (a Spark job:
progressing, reported by the new process) within a few minutes, and the speed layer's answers are
exact afterwards (traffic was in flight while it was killed)."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

from definitions import jobs
from infra import services as svc
from ingest.generator import GeneratorConfig
from stores.progress import read_progress
from stores.restarts import restart_report
from tests.support.events import fresh_seed, send
from tests.support.polling import wait_for
from tests.support.realtime import wait_until_exact

BACK_WITHIN_S = 30
# A Spark job is healthy once its new driver has started its queries and reported progress:
# Spark's own start-up, tens of seconds on a busy 2-core machine.
HEALTHY_WITHIN_S = 300
# The query whose first finished micro-batch shows a restarted Spark job progressing.
PROGRESSING = {"speed-layer": jobs.SPEED_QUERY, "archiver": jobs.ARCHIVER_MASTER_QUERY}


def _healthy(settings, stack, name: str, not_pid: int | None = None):
    """The process of `name` under the supervisor, answering its health probe (a Spark job's
    progress coming from that very process); None while it is not."""
    proc = stack.supervisor.process(name)
    if proc is None or proc.pid == not_pid:
        return None
    try:
        svc.BY_NAME[name].check(settings)
        if name in ("speed-layer", "archiver") and read_progress(settings, name).get("pid") != proc.pid:
            return None
    except Exception:  # not healthy yet: poll again
        return None
    return proc


def _respawned(stack, name: str, old_pid: int):
    proc = stack.supervisor.process(name)
    return proc if proc is not None and proc.pid != old_pid and proc.is_running() else None


def _kill_and_time(settings, stack, name: str) -> tuple[float, float]:
    """Seconds from the kill until a new process runs, and until it is healthy."""
    proc = wait_for(
        lambda: _healthy(settings, stack, name), f"{name} to be healthy before the kill", timeout_s=HEALTHY_WITHIN_S
    )
    os.kill(proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    wait_for(
        lambda: _respawned(stack, name, proc.pid),
        f"{name} to be running again by itself",
        timeout_s=BACK_WITHIN_S,
        interval_s=0.2,
    )
    running = time.monotonic() - killed
    wait_for(
        lambda: _healthy(settings, stack, name, not_pid=proc.pid),
        f"{name} to be healthy again",
        timeout_s=HEALTHY_WITHIN_S,
        interval_s=0.5,
    )
    healthy = time.monotonic() - killed
    report = restart_report(settings)[name]
    assert report["last_reason"] == "terminated by SIGKILL" and report["restarts_total"] >= 1, report
    progressing = ""
    if name in PROGRESSING:
        # Healthy means progressing: the new process finishes a micro-batch of its own.
        wait_for(
            lambda: _finished_a_batch(settings, name, PROGRESSING[name], not_pid=proc.pid),
            f"{name}'s new process to finish a micro-batch",
            timeout_s=HEALTHY_WITHIN_S,
            interval_s=0.5,
        )
        progressing = f", its first micro-batch done {time.monotonic() - killed:.1f}s"
    print(f"{name}: running again {running:.1f}s, healthy {healthy:.1f}s{progressing} after kill -9")
    return running, healthy


def _finished_a_batch(settings, name: str, query: str, not_pid: int) -> bool:
    try:
        state = read_progress(settings, name)
    except RuntimeError:
        return False
    return state.get("pid") != not_pid and "batch_id" in state["queries"].get(query, {})


def test_killed_processes_come_back_by_themselves_and_answers_stay_exact(settings, stack):
    for name in ("api", "speed-layer", "archiver"):
        assert stack.supervisor.supervised(name), f"{name} runs under the supervisor (run `lambdactl up` once)"
    took = {"api": _kill_and_time(settings, stack, "api")}

    # The speed layer is killed while traffic streams in.
    config = GeneratorConfig(
        seed=fresh_seed(),
        count=3_000,
        rate=300,
        pages=25,
        url_prefix=f"/heal-{uuid.uuid4().hex[:8]}",
        duplicate_fraction=0.05,
        late_fraction=0.1,
    )
    result: dict = {}
    producer = threading.Thread(target=lambda: result.setdefault("sent", send(settings, config)))
    producer.start()
    took["speed-layer"] = _kill_and_time(settings, stack, "speed-layer")
    producer.join(300)
    took["archiver"] = _kill_and_time(settings, stack, "archiver")

    after = send(settings, GeneratorConfig(seed=fresh_seed(), count=1_000, pages=25, url_prefix=config.url_prefix))
    wait_until_exact(settings, result["sent"] + after)
    assert all(running <= BACK_WITHIN_S for running, _ in took.values()), took

    # /health says what the supervisor did, in the same words (no log lines: they may name hosts).
    import httpx

    health = httpx.get(f"http://{settings.api.host}:{settings.api.port}/health", timeout=30).json()
    for name in took:
        row = health["restarts"][name]
        assert row["last_reason"] == "terminated by SIGKILL" and row["restarts_total"] >= 1, row
        assert row["state"] == "RUNNING" and not row["gave_up"] and "log_tail" not in row, row


def test_killed_stores_come_back_by_themselves_and_answers_stay_exact(settings, stack):
    """A store is a program of the supervisor like any other: Cassandra killed while traffic
    streams in, then Kafka, each runs again by itself, and the merged answers are exact after."""
    for name in ("cassandra", "kafka"):
        assert stack.supervisor.supervised(name), f"{name} runs under the supervisor (run `lambdactl up` once)"
    config = GeneratorConfig(
        seed=fresh_seed(),
        count=2_000,
        rate=200,
        pages=25,
        url_prefix=f"/heal-store-{uuid.uuid4().hex[:8]}",
        duplicate_fraction=0.05,
    )
    result: dict = {}
    producer = threading.Thread(target=lambda: result.setdefault("sent", send(settings, config)))
    producer.start()
    took = {"cassandra": _kill_and_time(settings, stack, "cassandra")}
    producer.join(300)
    took["kafka"] = _kill_and_time(settings, stack, "kafka")
    after = send(settings, GeneratorConfig(seed=fresh_seed(), count=1_000, pages=25, url_prefix=config.url_prefix))
    wait_until_exact(settings, result["sent"] + after)
    assert all(running <= BACK_WITHIN_S for running, _ in took.values()), took
    report = restart_report(settings)
    assert not any(row.get("gave_up") for row in report.values()), "no process used up its restarts meanwhile"


def _heartbeat_after(settings, component: str, moment: float) -> str | None:
    """The component's last heartbeat as Airflow reports it, once it is later than `moment` (epoch s)."""
    from datetime import datetime

    import httpx

    from stores.airflow import COMPONENTS, base_url

    try:
        entry = httpx.get(f"{base_url(settings)}/api/v2/monitor/health", timeout=10).json()[COMPONENTS[component]]
    except (httpx.HTTPError, ValueError, KeyError):
        return None
    beat = next((v for k, v in entry.items() if k.endswith("heartbeat")), None)
    if entry.get("status") != "healthy" or not beat or datetime.fromisoformat(beat).timestamp() <= moment:
        return None
    return beat


def test_killed_airflow_components_come_back_by_themselves(settings, stack):
    """Airflow's API server and scheduler are programs of their own: each killed one comes back
    alone (under `airflow standalone` a dead component stayed dead while its parent ran on), the
    new scheduler heartbeats, and nothing the killed one started is left behind."""
    import psutil

    for name in ("airflow", "airflow-scheduler", "airflow-dag-processor"):
        assert stack.supervisor.supervised(name), f"{name} runs under the supervisor (run `lambdactl up` once)"
    scheduler = stack.supervisor.process("airflow-scheduler")
    assert scheduler is not None
    children = scheduler.children(recursive=True)
    assert children, "the scheduler runs its executor's workers"
    killed_at = time.time()
    running, healthy = _kill_and_time(settings, stack, "airflow-scheduler")
    assert running <= BACK_WITHIN_S, running
    wait_for(
        lambda: _heartbeat_after(settings, "scheduler", killed_at),
        "the new scheduler's heartbeat",
        timeout_s=HEALTHY_WITHIN_S,
    )
    gone = wait_for(
        lambda: all(not c.is_running() or c.status() == psutil.STATUS_ZOMBIE for c in children),
        "the killed scheduler's workers to be ended",
        timeout_s=BACK_WITHIN_S,
    )
    assert gone
    running, healthy = _kill_and_time(settings, stack, "airflow")
    assert running <= BACK_WITHIN_S, running
    other = stack.supervisor.process("airflow-dag-processor")
    assert other is not None and other.is_running(), "the other components ran on"
