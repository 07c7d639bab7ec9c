"""One error body for every 4xx/5xx the API answers, and the handlers that produce it.

The body is `{"detail": "<what is wrong, for a person>"}`, with `errors` (where and what, one item
per problem) when there are several, and `component` when a store could not be read. It never
carries a traceback, an exception's text, a driver message, a host or a port: those go to the log.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema
from starlette.exceptions import HTTPException as StarletteHTTPException

from serving_layer.answers import ViewBuilding
from serving_layer.service import StoreUnavailable
from stores.adapters import ReadTooLarge

log = logging.getLogger("lambda.api")

Component = Literal["hbase", "cassandra", "kafka", "hdfs", "airflow"]
MAX_ERRORS = 100  # items of `errors` in one body
MAX_TEXT = 300  # characters of one message
VIEW_BUILDING_RETRY_S = 30  # Retry-After of a view that is being built


class FieldError(BaseModel):
    """A request parameter or body part that is wrong: where (`loc`) and what (`msg`)."""

    loc: list[str | int] = Field(description='where, e.g. ["query", "start"] or ["body"]')
    msg: str = Field(description="what is wrong")


class EventError(BaseModel):
    """An event of POST /api/v1/events that breaks the event contract."""

    index: int = Field(description="its position in the array")
    event_id: str | None = Field(None, description="its event_id, when it has a string one")
    error: str = Field(description="the rule it breaks and the field")


class ErrorBody(BaseModel):
    """Every error the API answers, 4xx or 5xx."""

    detail: str = Field(description="what is wrong, for a person")
    # Absent rather than null when there is nothing to say: None is the default, never in the schema.
    errors: list[FieldError | EventError] | SkipJsonSchema[None] = Field(
        None, description="each problem, when there are several"
    )
    component: Component | SkipJsonSchema[None] = Field(
        None, description="503: the part of the platform that could not be read"
    )


class ApiError(Exception):
    """An answer other than success; the handler renders it as an ErrorBody."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        errors: list[dict[str, Any]] | None = None,
        component: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = errors
        self.component = component
        self.headers = headers


DESCRIPTIONS = {
    400: "The request body is malformed: not well-formed JSON, nested deeper than an event can be, or cut short",
    401: "No valid bearer token (`Authorization: Bearer <token>`)",
    404: "No such resource",
    409: "The view is being added or rebuilt and cannot answer exactly yet; `detail` says why",
    413: "The request body is larger than the API accepts (`api.max_body_bytes`)",
    415: "The request body is not JSON text in UTF-8 (its Content-Type or Content-Encoding says another form)",
    422: "A parameter or the body is invalid; `detail` names it, `errors` lists each problem",
    429: "Too many queries at once; try again after `Retry-After` seconds",
    503: "A part of the platform cannot be read; `component` names it",
}


_REF = "#/components/schemas/ErrorBody"


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` documenting the given error statuses with ErrorBody (JSON, whatever the
    route's own media type)."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        out[code] = {"description": DESCRIPTIONS[code], "content": {"application/json": {"schema": {"$ref": _REF}}}}
        if code in (409, 429, 503):
            out[code]["headers"] = {
                "Retry-After": {
                    "description": "seconds to wait before asking again (a 503: when it names Kafka)",
                    "schema": {"type": "integer", "minimum": 1},
                }
            }
        if code == 401:
            out[code]["headers"] = {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}}
    return out


def _document_errors(schema: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI document with ErrorBody among its schemas, and FastAPI's own 422 (a body this
    app never sends: its handler renders ErrorBody) replaced by ErrorBody."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    error_body = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(error_body.pop("$defs", {}))
    components["ErrorBody"] = error_body
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            answer = operation.get("responses", {}).get("422")
            if answer and "HTTPValidationError" in str(answer):
                operation["responses"]["422"] = error_responses(422)[422]
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    return schema


_CLASS_NAME = re.compile(r"\b[A-Z][A-Za-z0-9_]*(?:Error|Exception|Warning): ")


# An absolute file path of two or more parts: everything before its last part.
_DIRECTORIES = re.compile(r"(?<![\w.:/])/(?:[^\s'\"()<>:,;/]+/)+(?=[^\s'\"()<>:,;/])")


def failure_text(exc: BaseException) -> str:
    """An exception as an answer may say it: its kind and message, each absolute file path cut to
    its file name (the host's directory layout is not the client's business)."""
    return f"{type(exc).__name__}: {_DIRECTORIES.sub('', str(exc))}"


def _text(value: Any) -> str:
    """Text safe to put in a JSON body: bounded, valid Unicode (a lone surrogate becomes "?"),
    without Python exception class names (`JSONDecodeError: …` says nothing to a user)."""
    text = _CLASS_NAME.sub("", value if isinstance(value, str) else str(value))
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + "…"
    return text.encode("utf-8", "replace").decode("utf-8", "replace") if not text.isascii() else text


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, dict):
        return {_text(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    return _text(value)


def error_response(
    status: int,
    detail: str,
    *,
    errors: list[dict[str, Any]] | None = None,
    component: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {"detail": _text(detail)}
    if errors:
        body["errors"] = _clean(errors[:MAX_ERRORS])
    if component:
        body["component"] = component
    return JSONResponse(body, status_code=status, headers=headers)


def _where(loc: Sequence[Any]) -> str:
    parts = [str(p) for p in loc]
    return ".".join(parts[1:] if len(parts) > 1 and parts[0] in ("query", "path", "header", "body") else parts)


async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
    return error_response(exc.status, exc.detail, errors=exc.errors, component=exc.component, headers=exc.headers)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    items = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "invalid"))} for e in exc.errors()]
    detail = "; ".join(f"{_where(i['loc'])}: {i['msg']}" for i in items[:5]) or "invalid request"
    return error_response(422, detail, errors=items)


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    detail = exc.detail if isinstance(exc.detail, str) else "request refused"
    return error_response(exc.status_code, detail, headers=getattr(exc, "headers", None))


def _logged_path(request: Request) -> str:
    """The path as the client sent it (request.url is rebuilt from the Host header, which the client
    chooses too), its control characters escaped: a log line says what was asked, nothing more."""
    path = str(request.scope.get("path", ""))[:300]
    return path if path.isprintable() else ascii(path)[1:-1]


async def _store_unavailable(request: Request, exc: StoreUnavailable) -> JSONResponse:
    log.warning("%s %s: %s cannot be read: %s", request.method, _logged_path(request), exc.component, exc.detail)
    return error_response(503, f"{exc.component} cannot be read right now; try again shortly", component=exc.component)


async def _view_building(request: Request, exc: ViewBuilding) -> JSONResponse:
    return error_response(409, str(exc), headers={"Retry-After": str(VIEW_BUILDING_RETRY_S)})


async def _read_too_large(request: Request, exc: ReadTooLarge) -> JSONResponse:
    return error_response(422, str(exc))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("%s %s failed unexpectedly", request.method, _logged_path(request), exc_info=exc)
    return error_response(500, "internal error: the request could not be answered; it has been logged")


def install(app: FastAPI) -> None:
    """Register the handlers: every error the app answers is an ErrorBody."""
    # Starlette types a handler as taking any Exception, so one for a subclass does not type-check
    # (encode/starlette#2417); each handler below only ever receives the class it is registered for.
    app.add_exception_handler(ApiError, _api_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(StoreUnavailable, _store_unavailable)  # type: ignore[arg-type]
    app.add_exception_handler(ViewBuilding, _view_building)  # type: ignore[arg-type]
    app.add_exception_handler(ReadTooLarge, _read_too_large)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _document_errors(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
