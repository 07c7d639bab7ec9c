"""GET /health and GET /api/v1/status."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import APIRouter

from api.deps import ServingDep, SettingsDep
from api.routes.views import iso
from serving_layer.service import StoreUnavailable

router = APIRouter(tags=["status"])


def _probe(fn, settings) -> dict[str, Any]:
    started = time.monotonic()
    try:
        return {"state": "ok", "detail": fn(settings), "ms": round((time.monotonic() - started) * 1000)}
    except Exception as exc:  # report every failure as the component's state
        return {"state": "down", "detail": f"{type(exc).__name__}: {str(exc)[:300]}"}


@router.get("/health", summary="200 with each component's state")
def health(settings: SettingsDep) -> dict[str, Any]:
    from infra import health as probes

    checks = {
        "kafka": probes.kafka,
        "hdfs": probes.hdfs_namenode,
        "hbase": probes.hbase_thrift,
        "cassandra": probes.cassandra,
        "archiver": probes.archiver,
        "speed-layer": probes.speed_layer,
    }
    with ThreadPoolExecutor(len(checks)) as pool:
        results = dict(zip(checks, pool.map(lambda fn: _probe(fn, settings), checks.values())))
    return {"status": "ok" if all(r["state"] == "ok" for r in results.values()) else "degraded",
            "components": results}


@router.get("/api/v1/status", summary="Batch version, cutoff, speed-layer lag, freshness")
def status(settings: SettingsDep, serving: ServingDep) -> dict[str, Any]:
    from ingest import completeness
    from ingest.streaming_progress import read_progress
    from speed_layer.job import JOB, QUERY

    now = time.time()
    body: dict[str, Any] = {"time": iso(now), "ingest_bucket_s": settings.ingest_bucket_s}
    try:
        pointer = serving.pointer()
        body["batch"] = None if pointer is None else {
            "version": pointer.version, "cutoff": iso(pointer.cutoff_ms / 1000), "run_id": pointer.run_id,
            "swapped": iso(pointer.swapped_ms / 1000) if pointer.swapped_ms else None,
            "cutoff_age_s": round(now - pointer.cutoff_ms / 1000), "views": pointer.views,
            "events": pointer.stats.get("events")}
    except StoreUnavailable as exc:
        body["batch"] = {"error": str(exc)}
    try:
        state = read_progress(settings, JOB)
        q = state["queries"].get(QUERY, {})
        last = q.get("timestamp")
        last_s = datetime_s(last) if last else None
        body["speed"] = {"running": bool(q.get("active")), "last_batch": last, "records_behind": q.get("rows_behind"),
                         "input_rows_per_s": q.get("input_rows_per_s"), "batch_ms": q.get("batch_ms"),
                         "state_rows": q.get("state_rows"),
                         "freshness_s": round(now - last_s, 1) if last_s else None}
    except RuntimeError as exc:
        body["speed"] = {"running": False, "error": str(exc)}
    try:
        marker = completeness.latest(settings)
        done = marker.complete_before_ms if marker else None
        body["master_dataset"] = {"complete_before": iso(done / 1000) if done else None,
                                  "lag_s": round(now - done / 1000, 1) if done else None}
    except Exception as exc:  # HDFS down: say so
        body["master_dataset"] = {"error": f"{type(exc).__name__}: {exc}"}
    return body


def datetime_s(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
