"""Dependencies injected into the routes (settings, the serving layer, metrics, the token check)."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

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


def require_token(request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
    expected = request.app.state.settings.api.token.get_secret_value()
    if credentials is None or not secrets.compare_digest(credentials.credentials.encode(), expected.encode()):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "a valid bearer token is required",
                            headers={"WWW-Authenticate": "Bearer"})


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
ServingDep = Annotated[ServingLayer, Depends(get_serving)]
MetricsDep = Annotated[ApiMetrics, Depends(get_metrics)]
TokenDep = Depends(require_token)
