"""Dependencies injected into the routes (settings, the serving layer, metrics, the token check) and
the bounded reading of a request body."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BeforeValidator
from starlette.requests import ClientDisconnect

from api.errors import ApiError
from api.metrics import ApiMetrics
from definitions.settings import Settings
from serving_layer.service import ServingLayer

_bearer = HTTPBearer(auto_error=False)


def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


def get_serving(request: Request) -> ServingLayer:
    return request.app.state.serving


def get_metrics(request: Request) -> ApiMetrics:
    return request.app.state.metrics


async def require_token(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> None:
    """The bearer token, checked from the headers alone: before any request body is read."""
    _check(credentials, request.app.state.settings.api.token.get_secret_value())


async def require_admin_token(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> None:
    """The admin routes' token (`api.admin_token`, else `api.token`), checked as require_token does."""
    _check(credentials, request.app.state.settings.api.admin_secret())


def _check(credentials: HTTPAuthorizationCredentials | None, expected: str) -> None:
    given = credentials.credentials if credentials is not None else ""
    if not given or not secrets.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode()):
        raise ApiError(
            401,
            "a valid bearer token is required: send `Authorization: Bearer <token>`",
            headers={"WWW-Authenticate": "Bearer"},
        )


class BodyRoom:
    """Bytes of request bodies one worker process holds at once (api.max_bodies_mib). Taken and
    given back on the event loop's thread only: no lock."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, size: int) -> None:
        if self.held + size > self.limit:
            raise ApiError(
                429,
                f"the API is busy: the request bodies it holds fill api.max_bodies_mib "
                f"({self.limit / 2**20:g} MiB); send it again shortly",
                headers={"Retry-After": "1"},
            )
        self.held += size


@asynccontextmanager
async def held_body(request: Request, cap: int) -> AsyncIterator[bytes]:
    """The request body, refused with 413 if it is (or declares to be) longer than `cap` bytes, and
    429 if the bytes the worker holds (BodyRoom) would pass its room as they come; its room is given
    back when the block ends."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not (declared.isascii() and declared.isdigit()):  # "²" is a digit to isdigit(), not to int()
            raise ApiError(400, "Content-Length is not a number of bytes")
        if len(declared) > 18 or int(declared) > cap:
            raise ApiError(413, f"request body of {declared[:20]} bytes is over the limit of {cap} bytes")
    room: BodyRoom = request.app.state.body_room
    taken = 0
    try:
        chunks, size = [], 0
        try:
            # Room is taken as the bytes come, not for the declared length: connections declaring
            # 4 MiB and sending one byte took every worker's room for a minute with ~1 KB in all.
            async for chunk in request.stream():
                size += len(chunk)
                if size > cap:
                    raise ApiError(413, f"request body is over the limit of {cap} bytes")
                if size > taken:
                    room.take(size - taken)
                    taken = size
                chunks.append(chunk)
        except ClientDisconnect:
            raise ApiError(400, "the request body ended before it was complete") from None
        yield b"".join(chunks)
    finally:
        room.held -= taken


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
ServingDep = Annotated[ServingLayer, Depends(get_serving)]
MetricsDep = Annotated[ApiMetrics, Depends(get_metrics)]
TokenDep = Depends(require_token)
AdminTokenDep = Depends(require_admin_token)


def _decimal_digits(value: Any) -> Any:
    """A count in a query is written in decimal digits: the int parser also took `1_0`, `10.0`, `+10`
    and ` 10` (each read as 10)."""
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise ValueError("must be a whole number written in decimal digits (0-9) alone")
    return value


# A query parameter that counts: Annotated[int, Query(...), DIGITS] (after the Query: nested in the
# type, its bounds left the OpenAPI document).
DIGITS = BeforeValidator(_decimal_digits)
