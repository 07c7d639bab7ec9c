"""The running API's worker processes (api.workers), on the real stack: queries are spread over them,
/metrics counts every one of them exactly, and a worker killed with -9 is replaced while the others
answer; a views reload then reaches the new worker and is not held up by the dead one."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import tempfile
from pathlib import Path

import httpx
import psutil
from prometheus_client import CollectorRegistry, generate_latest, multiprocess

from api.server import metrics_dir, workers_dir
from tests.support.polling import wait_for

ROUTE = "/api/v1/views"
COUNT = re.compile(r'lambda_api_request_seconds_count\{method="GET",route="/api/v1/views",status="200"\} (\S+)')


def _workers(stack) -> list[psutil.Process]:
    """The API's live worker processes (a killed one is a zombie until uvicorn reaps it, and then gone)."""
    proc = stack.supervisor.process("api")
    assert proc is not None, "the API runs under the supervisor"
    live = []
    for child in proc.children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(child.cmdline()):
                live.append(child)
        except psutil.Error:  # it ended meanwhile
            continue
    return live


def _counted(text: str) -> float:
    found = COUNT.search(text)
    return float(found.group(1)) if found else 0.0


def _counted_by(directory: Path, pid: int) -> float:
    """What one worker counted: its own files, collected alone."""
    with tempfile.TemporaryDirectory() as alone:
        for path in directory.glob(f"*_{pid}.db"):
            shutil.copy(path, alone)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=alone)
        return _counted(generate_latest(registry).decode())


def test_queries_spread_over_the_workers_and_metrics_count_every_one(settings, stack):
    base = f"http://{settings.api.host}:{settings.api.port}"
    workers = _workers(stack)
    assert len(workers) == settings.api.workers >= 2, [p.pid for p in workers]
    shared = metrics_dir(workers_dir(settings))
    before_total = _counted(httpx.get(f"{base}/metrics", timeout=10).text)
    before = {p.pid: _counted_by(shared, p.pid) for p in workers}
    asked = 200
    for _ in range(asked):  # a new connection each: the kernel hands each to whichever worker accepts
        assert httpx.get(f"{base}{ROUTE}", timeout=10).status_code == 200
    after_total = _counted(httpx.get(f"{base}/metrics", timeout=10).text)
    after = {p.pid: _counted_by(shared, p.pid) for p in workers}
    assert after_total - before_total == asked
    answered = {pid: after[pid] - before[pid] for pid in before}
    assert sum(answered.values()) == asked
    assert all(n > 0 for n in answered.values()), f"every worker answered some: {answered}"


def test_a_killed_worker_is_replaced_and_a_reload_reaches_its_successor(settings, stack):
    base = f"http://{settings.api.host}:{settings.api.port}"
    auth = {"Authorization": f"Bearer {settings.api.admin_secret()}"}  # admin routes only below
    workers = _workers(stack)
    victim, others = workers[0], workers[1:]
    os.kill(victim.pid, signal.SIGKILL)
    # The others answer meanwhile.
    for _ in range(20):
        assert httpx.get(f"{base}{ROUTE}", timeout=10).status_code == 200
    replaced = wait_for(
        lambda: (
            (len(now := _workers(stack)) == settings.api.workers and victim.pid not in [p.pid for p in now]) and now
        ),
        "uvicorn to start a worker in place of the killed one",
        timeout_s=60,
        interval_s=0.2,
    )
    assert {p.pid for p in others} <= {p.pid for p in replaced}, "the other workers were not restarted"
    directory = workers_dir(settings)

    def serving() -> dict[str, int]:
        """pid → the count of reloads each worker's file says it serves."""
        return {p.name.split("-")[1]: json.loads(p.read_text())["generation"] for p in directory.glob("worker-*")}

    wait_for(
        lambda: {str(p.pid) for p in replaced} <= set(serving()),
        "the new worker to start serving",
        timeout_s=60,
        interval_s=0.2,
    )
    reloaded = httpx.post(f"{base}/api/v1/admin/views/reload", headers=auth, timeout=60)
    assert reloaded.status_code == 200, reloaded.text
    generation, reloaded_at = map(int, (directory / "generation").read_text().split())
    assert reloaded_at == generation
    files = serving()
    assert str(victim.pid) not in files, "the dead worker's file was removed"
    assert all(files[str(p.pid)] == generation for p in replaced), (files, generation)
    # A refresh (what `lambdactl replay` asks) reaches every worker too, and counts no views reload.
    refreshed = httpx.post(f"{base}/api/v1/admin/views/refresh", headers=auth, timeout=60)
    assert refreshed.status_code == 200, refreshed.text
    assert refreshed.json()["views"] == reloaded.json()["views"]
    assert list(map(int, (directory / "generation").read_text().split())) == [generation + 1, generation]
    files = serving()
    assert all(files[str(p.pid)] == generation + 1 for p in replaced), (files, generation)
