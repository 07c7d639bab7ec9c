"""View queries: merged series for keyed views, top-N for by-bucket views, with provenance."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request

from api.deps import MetricsDep, ServingDep, SettingsDep
from definitions.settings import Settings
from definitions.views import GRANULARITIES, View
from serving_layer.service import SeriesAnswer, StoreUnavailable, TopAnswer, buckets_between

router = APIRouter(prefix="/api/v1/views", tags=["views"])

MAX_LIMIT = 100
DEFAULT_SPAN_BUCKETS = 48

Granularity = Annotated[str | None, Query(description="minute, hour or day (default: the view's finest)")]
Start = Annotated[str | None, Query(description="ISO-8601 time (default: 48 buckets before end)")]
End = Annotated[str | None, Query(description="ISO-8601 time, exclusive (default: now)")]
Partial = Annotated[bool, Query(description="answer without an unreadable store's part, flagged complete=false, instead of 503")]


def invalid(message: str) -> HTTPException:
    return HTTPException(422, message)


def iso(seconds: int | float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str, name: str) -> int:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise invalid(f"{name}: not an ISO-8601 time: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp())


def resolve_view(request: Request, name: str) -> View:
    registry = request.app.state.serving.views
    try:
        return registry[name]
    except KeyError:
        raise invalid(f"unknown view {name!r}; declared views: {', '.join(registry.names())}") from None


def resolve_window(settings: Settings, view: View, granularity: str | None, start: str | None, end: str | None,
                   now_s: int) -> tuple[str, int, int]:
    granularity = granularity or view.granularities[0]
    if granularity not in GRANULARITIES:
        raise invalid(f"granularity must be one of {', '.join(GRANULARITIES)}, got {granularity!r}")
    if granularity not in view.granularities:
        raise invalid(f"view {view.name} is kept at {', '.join(view.granularities)}, not {granularity}")
    size = GRANULARITIES[granularity]
    end_s = parse_time(end, "end") if end else now_s - now_s % size + size
    start_s = parse_time(start, "start") if start else end_s - DEFAULT_SPAN_BUCKETS * size
    if start_s >= end_s:
        raise invalid(f"start ({iso(start_s)}) must be before end ({iso(end_s)})")
    n = len(buckets_between(start_s, end_s, granularity))
    if n > settings.api.max_buckets:
        raise invalid(f"range too large: {n} {granularity} buckets, at most {settings.api.max_buckets}; "
                      "narrow it or use a coarser granularity")
    return granularity, start_s, end_s


def provenance(p) -> dict[str, Any]:
    return {"batch_version": p.version, "cutoff": iso(p.cutoff_ms / 1000) if p.cutoff_ms else None,
            "complete": p.complete, "unavailable": p.unavailable}


def series_body(answer: SeriesAnswer, start_s: int, end_s: int) -> dict[str, Any]:
    distinct = answer.view.aggregation == "distinct"
    return {
        "view": answer.view.name,
        "keys": answer.keys,
        "granularity": answer.granularity,
        "start": iso(start_s),
        "end": iso(end_s),
        "series": [
            {"bucket": iso(b.bucket), "value": round(b.value) if not distinct or b.exact else round(b.value, 1),
             "batch": b.batch, "speed": round(b.speed, 1) if distinct else b.speed, "exact": b.exact}
            for b in answer.series.buckets
        ],
        "total": answer.series.total if not distinct or answer.series.exact else round(answer.series.total, 1),
        "exact": answer.series.exact,
        "provenance": provenance(answer.provenance),
    }


def top_body(answer: TopAnswer, limit: int) -> dict[str, Any]:
    rows = []
    for key, value, batch, speed in answer.rows:
        values = json.loads(key)
        rows.append({**dict(zip(answer.view.keys, values)), "value": value, "batch": batch, "speed": speed})
    return {"view": answer.view.name, "granularity": answer.granularity, "start": iso(answer.start),
            "end": iso(answer.end), "limit": limit, "rows": rows, "provenance": provenance(answer.provenance)}


def answer_series(request: Request, settings: Settings, serving, metrics, view: View, keys: dict[str, str],
                  granularity, start, end, partial: bool) -> dict[str, Any]:
    missing = [k for k in view.keys if not keys.get(k)]
    if missing:
        raise invalid(f"view {view.name} needs {', '.join(missing)} (its keys: {', '.join(view.keys)})")
    granularity, start_s, end_s = resolve_window(settings, view, granularity, start, end, serving.now_s())
    try:
        answer = serving.series(view, keys, start_s, end_s, granularity, allow_partial=partial)
    except StoreUnavailable as exc:
        metrics.store_errors.labels(exc.component).inc()
        raise HTTPException(503, {"component": exc.component, "message": str(exc)}) from None
    record(metrics, view, answer.series.buckets, answer.provenance)
    return series_body(answer, start_s, end_s)


def answer_top(settings: Settings, serving, metrics, view: View, granularity, start, end, limit: int, partial: bool):
    if view.layout != "by_bucket":
        raise invalid(f"view {view.name} is not laid out by bucket; query it with its keys ({', '.join(view.keys)})")
    if not 1 <= limit <= MAX_LIMIT:
        raise invalid(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    granularity, start_s, end_s = resolve_window(settings, view, granularity, start, end, serving.now_s())
    try:
        answer = serving.top(view, start_s, end_s, granularity, limit, allow_partial=partial)
    except StoreUnavailable as exc:
        metrics.store_errors.labels(exc.component).inc()
        raise HTTPException(503, {"component": exc.component, "message": str(exc)}) from None
    if not answer.provenance.complete:
        metrics.partial_answers.labels(view.name).inc()
    return top_body(answer, limit)


def record(metrics, view: View, buckets, prov) -> None:
    metrics.merged_buckets.labels(view.name, "batch").inc(sum(1 for b in buckets if b.batch))
    metrics.merged_buckets.labels(view.name, "speed").inc(sum(1 for b in buckets if b.speed))
    if not prov.complete:
        metrics.partial_answers.labels(view.name).inc()


@router.get("", summary="The declared views and their keys")
def list_views(request: Request) -> dict[str, Any]:
    return {"views": [
        {"name": v.name, "keys": list(v.keys), "aggregation": v.aggregation, "column": v.column, "where": v.where,
         "granularities": list(v.granularities), "layout": v.layout, "description": v.description}
        for v in request.app.state.serving.views
    ]}


@router.get("/page_views", summary="Merged page views of one URL: series, total, provenance")
def page_views(request: Request, settings: SettingsDep, serving: ServingDep, metrics: MetricsDep,
               url: Annotated[str, Query(description="the page path")], granularity: Granularity = None,
               start: Start = None, end: End = None, partial: Partial = False) -> dict[str, Any]:
    view = resolve_view(request, "page_views")
    return answer_series(request, settings, serving, metrics, view, {"url": url}, granularity, start, end, partial)


@router.get("/unique_visitors", summary="Merged distinct visitors of one URL: estimate per bucket, exact flag")
def unique_visitors(request: Request, settings: SettingsDep, serving: ServingDep, metrics: MetricsDep,
                    url: Annotated[str, Query(description="the page path")], granularity: Granularity = None,
                    start: Start = None, end: End = None, partial: Partial = False) -> dict[str, Any]:
    view = resolve_view(request, "unique_visitors")
    return answer_series(request, settings, serving, metrics, view, {"url": url}, granularity, start, end, partial)


@router.get("/top_pages", summary="Top URLs by merged page views over a window")
def top_pages(request: Request, settings: SettingsDep, serving: ServingDep, metrics: MetricsDep,
              granularity: Granularity = None, start: Start = None, end: End = None,
              limit: Annotated[int, Query(description=f"1 to {MAX_LIMIT}")] = 10, partial: Partial = False) -> dict[str, Any]:
    view = resolve_view(request, "top_pages")
    return answer_top(settings, serving, metrics, view, granularity, start, end, limit, partial)


@router.get("/{view_name}", summary="Any declared view: keyed views take their keys as query parameters")
def any_view(view_name: str, request: Request, settings: SettingsDep, serving: ServingDep, metrics: MetricsDep,
             granularity: Granularity = None, start: Start = None, end: End = None,
             limit: Annotated[int, Query(description=f"by-bucket views: 1 to {MAX_LIMIT}")] = 10,
             partial: Partial = False) -> dict[str, Any]:
    view = resolve_view(request, view_name)
    if view.layout == "by_bucket":
        return answer_top(settings, serving, metrics, view, granularity, start, end, limit, partial)
    keys = {k: request.query_params.get(k, "") for k in view.keys}
    return answer_series(request, settings, serving, metrics, view, keys, granularity, start, end, partial)
