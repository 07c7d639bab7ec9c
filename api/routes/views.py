"""View queries: one route per declared view, merged series for keyed views and top-N for by-bucket
views, with provenance.

The routes are made from the view declarations when the app is created, so the OpenAPI document
says exactly what each view takes: its keys as required query parameters, the granularities it is
kept at, the time format. Every parameter and the window (api/window.py) are checked before a
query slot is taken, and a query slot before a store is read: at most api.max_concurrent_queries
queries run at once, the others wait up to api.query_queue_s, then get a 429 with Retry-After.
"""

from __future__ import annotations

import inspect
import ipaddress
import math
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from api.deps import DIGITS
from api.errors import ApiError, error_responses
from api.thread_calls import in_thread
from api.view_bodies import SeriesBody, TopBody, ViewsBody, series_body, top_body
from api.window import DEFAULT_SPAN_BUCKETS, TIME_EXAMPLE, TIME_PATTERN, iso, resolve_window
from definitions.events import FIELDS, value_pattern
from definitions.layer_settings import MAX_KEY_BYTES
from definitions.settings import Settings
from definitions.view_versions import Versions
from definitions.views import View
from serving_layer.service import StoreUnavailable

PREFIX = "/api/v1/views"
MAX_LIMIT = 100

# --- parameters -----------------------------------------------------------------------------------


def _time_param(what: str, example: str) -> Any:
    return Query(
        description=f"{what}: an ISO-8601 (RFC 3339) time with a zone, like {TIME_EXAMPLE}",
        examples=[example],
        json_schema_extra={"format": "date-time", "pattern": TIME_PATTERN},
    )


def _common_params(view: View, settings: Settings) -> list[inspect.Parameter]:
    api = settings.api
    keyword = inspect.Parameter.KEYWORD_ONLY
    granularity: Any = Literal[view.granularities]  # built at run time from the view's declaration
    return [
        inspect.Parameter(
            "granularity",
            keyword,
            default=view.granularities[0],
            annotation=Annotated[
                granularity, Query(description=f"bucket size; the view is kept at {', '.join(view.granularities)}")
            ],
        ),
        inspect.Parameter(
            "start",
            keyword,
            default=None,
            annotation=Annotated[
                str,
                _time_param(
                    f"start of the window, rounded down to its bucket (default: {DEFAULT_SPAN_BUCKETS} buckets "
                    "before end); at or after "
                    f"{iso(api.earliest_query_time_s)}, before end, at most {api.max_buckets} buckets before it",
                    "2026-11-21T10:00:00Z",
                ),
            ],
        ),
        inspect.Parameter(
            "end",
            keyword,
            default=None,
            annotation=Annotated[
                str,
                _time_param(
                    f"end of the window, exclusive, rounded up to a bucket's end (default: the end of the "
                    "current bucket); at most "
                    f"{api.max_query_ahead_s}s after now",
                    "2026-11-21T11:00:00Z",
                ),
            ],
        ),
        inspect.Parameter(
            "partial",
            keyword,
            default=False,
            annotation=Annotated[
                bool,
                Query(description="answer without an unreadable store's part, flagged complete=false, instead of 503"),
            ],
        ),
    ]


def _key_param(name: str, settings: Settings) -> inspect.Parameter:
    """A view key as a required query parameter, constrained as the event contract constrains the
    field (a value no event can hold is a 422, not an empty answer)."""
    field = next(f for f in FIELDS if f.name == name)
    setting = getattr(field, "limit_setting", "")
    max_len = int(getattr(settings.events, setting)) if setting else field.max_len
    kind: Any = Literal[field.choices] if field.choices else str
    query = Query(
        min_length=None if field.choices else 1,
        max_length=None if field.choices else (max_len or None),
        pattern=value_pattern(field),
        description=f"the view's key {name}: {field.doc}",
    )
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[kind, query])


def check_key_bytes(keys: dict[str, Any], max_bytes: int) -> None:
    """422 for a key longer in UTF-8 than a whole event record (no event holds it) or than the
    stores' keys take: the parameters are bounded in characters."""
    for name, value in keys.items():
        size = len(value.encode("utf-8", "surrogatepass")) if isinstance(value, str) else 0
        if size > max_bytes:
            raise ApiError(422, f"{name}: {size} bytes in UTF-8, longer than any view key can be ({max_bytes} bytes)")


# --- answering ------------------------------------------------------------------------------------


async def run_query(request: Request, fn, *args, **kwargs):
    """Run a store query in a worker thread once one of the api.max_concurrent_queries slots is
    free; 429 after api.query_queue_s without one, and at once when a client of another host (its
    address; its /64 for IPv6: client_key) has api.max_queries_per_client queries running or waiting already: a few clients cannot
    take every slot."""
    state = request.app.state
    address = request.client.host if request.client is not None else ""
    if _on_this_host(address):  # the platform's own tools, benchmarks, a proxy that names no client
        return await _run_in_a_slot(request, fn, *args, **kwargs)
    client = client_key(address)
    limit = state.settings.api.max_queries_per_client
    if state.client_queries.get(client, 0) >= limit:
        raise ApiError(
            429,
            f"this client has {limit} view queries running or waiting already (api.max_queries_per_client): "
            "send the next one when one has been answered",
            headers={"Retry-After": "1"},
        )
    state.client_queries[client] = state.client_queries.get(client, 0) + 1
    try:
        return await _run_in_a_slot(request, fn, *args, **kwargs)
    finally:
        left = state.client_queries[client] - 1
        if left:
            state.client_queries[client] = left
        else:
            del state.client_queries[client]  # the map holds clients with queries only


# The IPv6 addresses of one client are counted together: a host is given a /64 (or more) and may
# send from any address in it, so counted by address it took every query slot.
IPV6_CLIENT_BITS = 64


def client_key(address: str) -> str:
    """Whose queries a request's are, for api.max_queries_per_client: its IPv4 address (also one
    mapped into IPv6), its IPv6 address's /64, or what the server said (a Unix socket's peer)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, IPV6_CLIENT_BITS), strict=False))
    return str(ip)


def _on_this_host(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            return ip.ipv4_mapped.is_loopback  # a dual-stack socket's IPv4 client (Python 3.11 says no)
        return ip.is_loopback
    except ValueError:  # a Unix socket's peer, a name: counted as a client of its own
        return False


async def _run_in_a_slot(request: Request, fn, *args, **kwargs):
    state = request.app.state
    queue_s = state.settings.api.query_queue_s
    acquired = False
    try:  # a free slot is taken at once, whatever the wait allowed (move_on_after(0) never tries)
        state.query_slots.acquire_nowait()
        acquired = True
    except anyio.WouldBlock:
        with anyio.move_on_after(queue_s):
            await state.query_slots.acquire()
            acquired = True
    if not acquired:
        raise ApiError(
            429,
            f"the API is busy: {state.settings.api.max_concurrent_queries} queries are running "
            f"and none finished within {queue_s:g}s; try again shortly",
            headers={"Retry-After": str(max(1, math.ceil(queue_s)))},
        )
    try:
        return await in_thread(fn, *args, **kwargs)
    except StoreUnavailable as exc:
        state.metrics.store_errors.labels(exc.component).inc()
        raise
    finally:
        state.query_slots.release()
        if state.serving.take_stale_routes():  # the definitions answering the views moved: new routes
            from api.views_install import remake_routes

            await run_in_threadpool(remake_routes, request.app)


def record(metrics, name: str, buckets, prov) -> None:
    metrics.merged_buckets.labels(name, "batch").inc(sum(1 for b in buckets if b.batch))
    metrics.merged_buckets.labels(name, "speed").inc(sum(1 for b in buckets if b.speed))
    if not prov.complete:
        metrics.partial_answers.labels(name).inc()


# An error names at most this many unknown parameters, each cut to this many characters (api.errors
# cuts a whole message at MAX_TEXT: the count of the rest and the parameters taken stay in it).
MAX_NAMES_SHOWN, MAX_NAME_SHOWN = 3, 32


def _not_utf8(query: bytes) -> list[str]:
    """The names (as decoded, at most MAX_NAMES_SHOWN) of query parameters whose name or value is no
    UTF-8 text once percent-decoded: Starlette replaces such bytes with U+FFFD without a word."""
    from urllib.parse import unquote_to_bytes

    bad: list[str] = []
    for pair in query.split(b"&"):
        name, _, value = pair.partition(b"=")
        for part in (name, value):
            try:
                unquote_to_bytes(part.replace(b"+", b" ")).decode("utf-8")
            except UnicodeDecodeError:
                shown = unquote_to_bytes(name).decode("utf-8", "replace")[:MAX_NAME_SHOWN]
                if shown not in bad:
                    bad.append(shown)
                break
        if len(bad) >= MAX_NAMES_SHOWN:
            break
    return bad


def given_once(request: Request, names) -> None:
    """A 422 naming a parameter the route does not take (a misspelled one was passed over, and the
    answer was for its default: ?from=…&to=… for the last hour), or one given more than once (its
    last value was taken without a word)."""
    taken = list(names)
    garbled = _not_utf8(request.scope.get("query_string", b""))
    if garbled:
        raise ApiError(
            422,
            f"{', '.join(garbled)}: not UTF-8 text once percent-decoded",
            errors=[{"loc": ["query", k], "msg": "not UTF-8 text"} for k in garbled],
        )
    unknown = sorted({k for k in request.query_params if k not in taken})
    if unknown:
        shown = [k[:MAX_NAME_SHOWN] for k in unknown[:MAX_NAMES_SHOWN]]  # the request head bounds the rest
        more = f" and {len(unknown) - len(shown)} more" if len(unknown) > len(shown) else ""
        raise ApiError(
            422,
            f"{', '.join(k or '(an empty name)' for k in shown)}{more}: not a parameter of this view; "
            f"it takes {', '.join(taken)}",
            errors=[{"loc": ["query", k], "msg": "not a parameter of this view"} for k in shown],
        )
    repeated = sorted({k for k in taken if len(request.query_params.getlist(k)) > 1})
    if repeated:
        raise ApiError(
            422,
            f"{', '.join(repeated)}: given more than once; give each parameter once",
            errors=[{"loc": ["query", k], "msg": "given more than once"} for k in repeated],
        )


def series_endpoint(name: str, view: View, settings: Settings):
    """The route of view `name`, answered by `view` (the definition serving it, under its storage name)."""

    async def endpoint(request: Request, **params: Any) -> JSONResponse:
        given_once(request, params)
        serving = request.app.state.serving
        window = resolve_window(
            settings.api, view, params["granularity"], params["start"], params["end"], serving.now_s()
        )
        keys = {k: params[k] for k in view.keys}
        check_key_bytes(keys, min(settings.events.max_record_bytes, MAX_KEY_BYTES))
        answer = await run_query(
            request,
            serving.series,
            view,
            keys,
            window.start_s,
            window.end_s,
            window.granularity,
            allow_partial=params["partial"],
        )
        record(request.app.state.metrics, name, answer.series.buckets, answer.provenance)
        # Plain JSON types already: straight to JSON (FastAPI's generic encoding cost more than the query).
        return JSONResponse(series_body(name, answer, window.start_s, window.end_s))

    params = [_key_param(k, settings) for k in view.keys] + _common_params(view, settings)
    endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request), *params]
    )
    return endpoint


def top_endpoint(name: str, view: View, settings: Settings):
    async def endpoint(request: Request, **params: Any) -> JSONResponse:
        given_once(request, params)
        serving = request.app.state.serving
        window = resolve_window(
            settings.api, view, params["granularity"], params["start"], params["end"], serving.now_s()
        )
        answer = await run_query(
            request,
            serving.top,
            view,
            window.start_s,
            window.end_s,
            window.granularity,
            params["limit"],
            allow_partial=params["partial"],
        )
        if not answer.provenance.complete:
            request.app.state.metrics.partial_answers.labels(name).inc()
        return JSONResponse(top_body(name, answer, params["limit"]))

    limit = inspect.Parameter(
        "limit",
        inspect.Parameter.KEYWORD_ONLY,
        default=10,
        annotation=Annotated[int, Query(ge=1, le=MAX_LIMIT, description=f"how many rows, 1 to {MAX_LIMIT}"), DIGITS],
    )
    params = _common_params(view, settings)
    endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request), *params, limit]
    )
    return endpoint


# --- the router -----------------------------------------------------------------------------------


def views_router(settings: Settings, versions: Versions) -> APIRouter:
    """GET /api/v1/views, one GET /api/v1/views/<name> per declared view (answered by the definition
    serving it: definitions.view_versions), and a 404 naming the declared views for any other name."""
    router = APIRouter(prefix=PREFIX, tags=["views"])
    declared = [
        {
            "name": name,
            "keys": list(v.keys),
            "aggregation": v.aggregation,
            "column": v.column,
            "where": v.where,
            "granularities": list(v.granularities),
            "layout": v.layout,
            "description": v.description,
        }
        for name, v in versions.served.items()
    ]

    async def list_views(request: Request) -> dict[str, Any]:
        # A query slot like any view query: it reads the pointer from HBase (asked without a token, a
        # crowd of these held the worker threads and the HBase connections queries wait for).
        try:
            states = {s.name: s for s in await run_query(request, request.app.state.serving.view_states)}
        except StoreUnavailable:
            states = {}
        out = []
        for info in declared:
            known = states.get(info["name"])
            out.append(
                {
                    **info,
                    "state": known.state if known else "unknown",
                    "reason": known.reason or None if known else None,
                    "changing": known.changing or None if known else None,
                }
            )
        return {"views": out}

    router.add_api_route(
        "",
        list_views,
        methods=["GET"],
        summary="The declared views, their keys and their state",
        response_model=None,
        responses={200: {"model": ViewsBody}},
    )
    body: type[BaseModel]
    for name, view in versions.served.items():
        if view.layout == "by_bucket":
            endpoint, body = top_endpoint(name, view, settings), TopBody
            summary = f"Top {', '.join(view.keys)} by merged {name} over a window"
        else:
            endpoint, body = series_endpoint(name, view, settings), SeriesBody
            summary = f"Merged {name} of one {', '.join(view.keys)}: series, total, provenance"
        endpoint.__name__ = f"view_{name}"
        router.add_api_route(
            f"/{name}",
            endpoint,
            methods=["GET"],
            summary=summary,
            description=view.description,
            response_model=None,
            responses={200: {"model": body}, **error_responses(409, 422, 429, 503)},
        )

    names = list(versions.served)

    async def unknown_view(request: Request) -> None:
        name = request.path_params["view_name"]
        raise ApiError(404, f"unknown view {name[:100]!r}; declared views: {', '.join(names)}")

    # Not in the OpenAPI document: by the document's own rule a concrete path wins over a template,
    # so a template here would claim the declared views' URLs too, with answers it cannot describe.
    # Each declared view has its exact route above; any other name is a 404 like any unknown path.
    router.add_api_route("/{view_name}", unknown_view, methods=["GET"], include_in_schema=False)
    return router
