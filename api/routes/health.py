"""GET /health and GET /api/v1/status."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from api.deps import ServingDep, SettingsDep
from api.window import iso
from serving_layer.service import StoreUnavailable
from stores.progress import Stuck

log = logging.getLogger("lambda.api")
router = APIRouter(tags=["status"])


class ComponentHealth(BaseModel):
    state: str
    detail: str
    ms: int | None = None


class HealthBody(BaseModel):
    status: str
    components: dict[str, ComponentHealth]
    restarts: dict[str, dict[str, Any]] = Field(
        description="per supervised process: state, restarts within the budget's window and in all, the last "
        "exit's time and reason (exit status or signal), whether the supervisor gave up"
    )


def _probe(name: str, fn, settings) -> dict[str, Any]:
    started = time.monotonic()
    try:
        return {"state": "ok", "detail": fn(settings), "ms": round((time.monotonic() - started) * 1000)}
    except Stuck as exc:  # running but not progressing: say how long and how far behind (no addresses in it)
        log.warning("health: %s is %s", name, exc)
        return {"state": "stuck", "detail": str(exc)}
    except Exception as exc:  # report every failure as the component's state; the why goes to the log
        log.warning("health: %s is down: %s: %s", name, type(exc).__name__, exc)
        return {"state": "down", "detail": f"{name} does not answer (the API's log says why)"}


# /health answers without a token: its probes (a client for each store, six threads) run at most once
# per HEALTH_PERIOD_S per app (worker), however many ask, one request at a time; the others answer
# with the last answer meanwhile (the very first ones wait for it, FIRST_WAIT_S at most, then answer "probing").
HEALTH_PERIOD_S = 2.0
FIRST_WAIT_S = 2.0  # how long a request waits for a worker's first answer before it says it is probing


class _HealthCache:
    """The last answer of an unauthenticated route that reads the stores, kept HEALTH_PERIOD_S: the
    stores are read once per period however many ask, by one request at a time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answer: tuple[float, dict[str, Any]] | None = None

    def get(self, compute: Callable[[], dict[str, Any]], pending: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The kept answer, or `compute()`'s; `pending()` for a request that waited FIRST_WAIT_S for
        the first answer of all (stores slow to answer: the waiters would hold the threads queries
        run on)."""
        kept = self.answer
        if kept is not None and time.monotonic() - kept[0] < HEALTH_PERIOD_S:
            return kept[1]
        if kept is not None and not self.lock.acquire(blocking=False):
            return kept[1]  # another request is reading: the last answer meanwhile, no thread held up
        if kept is None and not self.lock.acquire(timeout=FIRST_WAIT_S):  # the first answer: wait a while
            kept = self.answer
            return kept[1] if kept is not None else pending()
        try:
            kept = self.answer
            if kept is None or time.monotonic() - kept[0] >= HEALTH_PERIOD_S:
                kept = self.answer = (time.monotonic(), compute())
            return kept[1]
        finally:
            self.lock.release()


def _health_cache(app, name: str = "health") -> _HealthCache:
    caches = getattr(app.state, "health_caches", None)
    if caches is None:
        caches = app.state.health_caches = {}
    return caches.setdefault(name, _HealthCache())


def forget_health(app) -> None:
    """Read the stores again at the next request (tests)."""
    for cache in getattr(app.state, "health_caches", {}).values():
        with cache.lock:
            cache.answer = None


@router.get(
    "/health", summary="200 with each component's state", response_model=None, responses={200: {"model": HealthBody}}
)
def health(request: Request, settings: SettingsDep) -> dict[str, Any]:
    return _health_cache(request.app).get(
        lambda: _probe_all(settings),
        lambda: {"status": "probing", "components": {}, "restarts": {}, "detail": PROBING},
    )


PROBING = "this API worker's first look at the stores is under way: ask again in a few seconds"


def _probe_all(settings) -> dict[str, Any]:
    from stores import health as probes
    from stores.restarts import restart_report

    checks = {
        "kafka": probes.kafka,
        "hdfs": probes.hdfs_namenode,
        "hbase": probes.hbase_thrift,
        "cassandra": probes.cassandra,
        "archiver": probes.archiver,
        "speed-layer": probes.speed_layer,
    }
    with ThreadPoolExecutor(len(checks)) as pool:
        results = dict(zip(checks, pool.map(lambda item: _probe(item[0], item[1], settings), checks.items())))
    try:
        restarts = {
            name: {k: v for k, v in row.items() if k != "log_tail"} for name, row in restart_report(settings).items()
        }
    except Exception as exc:  # an unreadable status file must not turn health into a 500
        log.warning("health: the supervisor's restart status cannot be read: %s: %s", type(exc).__name__, exc)
        restarts = {}
    healthy = all(r["state"] == "ok" for r in results.values()) and not any(r["gave_up"] for r in restarts.values())
    return {"status": "ok" if healthy else "degraded", "components": results, "restarts": restarts}


@router.get("/api/v1/status", summary="Batch version, cutoff, speed-layer lag, freshness")
def status(request: Request, settings: SettingsDep, serving: ServingDep) -> dict[str, Any]:
    return _health_cache(request.app, "status").get(
        lambda: _status(settings, serving),
        lambda: {
            "time": iso(time.time()),
            "ingest_bucket_s": settings.ingest_bucket_s,
            "probing": PROBING,
            "batch": {"error": PROBING},
            "speed": {"error": PROBING},
        },
    )


def _status(settings, serving) -> dict[str, Any]:
    from definitions.jobs import SPEED_LAYER as JOB
    from definitions.jobs import SPEED_QUERY as QUERY
    from stores import completeness
    from stores.progress import read_progress

    now = time.time()
    body: dict[str, Any] = {"time": iso(now), "ingest_bucket_s": settings.ingest_bucket_s}
    try:
        pointer = serving.pointer()
        body["batch"] = (
            None
            if pointer is None or not pointer.entries  # no view served from a batch table (all retired)
            else {
                "version": pointer.version,
                "cutoff": iso(pointer.cutoff_ms / 1000),
                "run_id": pointer.run_id,
                "swapped": iso(pointer.swapped_ms / 1000) if pointer.swapped_ms else None,
                "cutoff_age_s": round(now - pointer.cutoff_ms / 1000),
                "views": pointer.views,
                "events": pointer.stats.get("events"),
            }
        )
        states = serving.view_states()
        body["views"] = {
            s.name: {
                "batch_version": s.version,
                "cutoff": iso(s.cutoff_ms / 1000) if s.cutoff_ms else None,
                "stale": s.stale,
                "state": s.state,
                "reason": s.reason or None,
            }
            for s in states
        }
        body["stale_views"] = [s.name for s in states if s.stale]
    except StoreUnavailable as exc:
        log.warning("status: %s cannot be read: %s", exc.component, exc.detail)
        body["batch"] = {"error": f"{exc.component} cannot be read", "component": exc.component}
    try:
        state = read_progress(settings, JOB)
        q = state["queries"].get(QUERY, {})
        last = q.get("timestamp")
        last_s = datetime_s(last) if last else None
        body["speed"] = {
            "running": bool(q.get("active")),
            "last_batch": last,
            "records_behind": q.get("rows_behind"),
            "input_rows_per_s": q.get("input_rows_per_s"),
            "batch_ms": q.get("batch_ms"),
            "state_rows": q.get("state_rows"),  # None: its state store does not count them
            "state_bytes": q.get("state_bytes"),
            "freshness_s": round(now - last_s, 1) if last_s else None,
        }
    except Exception as exc:  # its progress cannot be read (HDFS down, never started): say so
        log.warning("status: the speed layer's progress cannot be read: %s: %s", type(exc).__name__, exc)
        body["speed"] = {"running": False, "error": "the speed layer's progress cannot be read"}
    try:
        marker = completeness.latest(settings)
        done = marker.complete_before_ms if marker else None
        body["master_dataset"] = {
            "complete_before": iso(done / 1000) if done else None,
            "lag_s": round(now - done / 1000, 1) if done else None,
        }
    except Exception as exc:  # HDFS down: say so
        log.warning("status: the master dataset's completeness cannot be read: %s: %s", type(exc).__name__, exc)
        body["master_dataset"] = {"error": "hdfs cannot be read", "component": "hdfs"}
    return body


def datetime_s(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
