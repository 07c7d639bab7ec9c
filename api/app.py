"""The FastAPI application: small; routes live in api/routes, one router per resource."""

from __future__ import annotations

import asyncio
import logging
import threading
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST

from api import errors
from api.deps import BodyRoom
from api.metrics import ApiMetrics
from api.middleware import HeadersAndLatency
from api.routes import admin, events, health, reports
from api.views_install import install_views, refresh_views, reload_views
from api.worker_sync import WorkerSync
from definitions.settings import Settings, default_secrets
from definitions.view_loading import load_views
from serving_layer.pointer_floor import PointerFloor
from serving_layer.service import ServingLayer

log = logging.getLogger("lambda.api")
STATIC = Path(__file__).resolve().parent / "static"


class InsecureSettings(RuntimeError):
    pass


def check_settings(settings: Settings) -> None:
    """Refuse to serve with the default token anywhere but development; say when any Host is taken."""
    if settings.api.host_names() is None and "*" not in settings.api.allowed_hosts:
        log.warning(
            "the API answers requests naming any host (api.host %s listens on every address, api.allowed_hosts "
            "unset): a web page whose name is pointed at this machine can read its answers; list the names "
            "clients use in api.allowed_hosts",
            settings.api.host,
        )
    if settings.environment == "development":
        return
    if not settings.api.admin_token.get_secret_value():
        log.warning(
            "api.admin_token is unset: the admin routes (a recomputation, a reload of the views) take api.token, "
            "which every event producer holds; set LAMBDA_API__ADMIN_TOKEN to a token of its own"
        )
    tokens = [name for name in default_secrets(settings) if name.startswith("api.")]
    if tokens:
        raise InsecureSettings(
            f"environment is {settings.environment!r} but these still hold the development default: "
            f"{', '.join(tokens)}; set them to secrets"
        )


class _LazyProducer:
    """One Kafka producer for the process, created on first use (the API starts without Kafka)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.lock = threading.Lock()
        self.producer = None

    def __call__(self):
        from stores import kafka

        with self.lock:
            if self.producer is None:
                # A send waits at most 5 s for the brokers' metadata or buffer room (60 s by default):
                # while Kafka is away a POST gets its 503 in seconds. A record is given up after
                # events.KAFKA_ACK_S (kafka-python's default: two minutes), before its request's 503.
                delivery_ms = int(events.KAFKA_ACK_S * 1000)
                self.producer = kafka.producer(
                    self.settings,
                    "lambda-api",
                    linger_ms=5,
                    max_block_ms=5_000,
                    delivery_timeout_ms=delivery_ms,
                    request_timeout_ms=max(1_000, delivery_ms - 1_000),
                )
            return self.producer

    def close(self) -> None:
        """Closes the producer once each record it holds is written or given up (by its delivery
        timeout): kafka-python's close raises while one is left, a shutdown cut short."""
        if self.producer is not None:
            try:
                self.producer.close(timeout=events.KAFKA_ACK_S + 1)
            except Exception as exc:  # the process ends anyway; the driver's words go to the log
                log.warning("Kafka producer not closed cleanly: %s: %s", type(exc).__name__, str(exc)[:300])


def create_app(settings: Settings, sync: WorkerSync | None = None, metrics_dir: Path | None = None) -> FastAPI:
    """The app; `sync` and `metrics_dir` when it is one of several worker processes (api/server.py)."""
    check_settings(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.settings = settings
        floor = None if sync is None else PointerFloor(sync.directory / "pointer-generation")
        app.state.serving = ServingLayer(settings, app.state.views, floor)
        install_views(app, settings, app.state.views)  # each view answered by the definition serving it
        app.state.metrics = ApiMetrics(metrics_dir)
        app.state.producer = _LazyProducer(settings)
        app.state.query_slots = anyio.Semaphore(settings.api.max_concurrent_queries)
        app.state.client_queries = {}  # client address -> its view queries running or waiting
        app.state.body_room = BodyRoom(settings.api.bodies_bytes())
        app.state.worker_sync = sync
        following = None
        if sync is not None:
            following = asyncio.ensure_future(
                sync.follow(lambda: reload_views(app, settings), lambda: refresh_views(app))
            )
        yield
        if following is not None and sync is not None:
            following.cancel()
            sync.close()
        app.state.serving.close()
        app.state.producer.close()

    app = FastAPI(
        title="Lambda platform query API",
        version="1",
        description="Merged answers of the batch (HBase) and speed (Cassandra) views, exact at the ingest-time cutoff.",
        lifespan=lifespan,
        # A trailing slash is no route: Starlette's redirect named the request's Host in its Location.
        redirect_slashes=False,
        # The interactive docs load Swagger UI's script from a CDN onto the API's origin: in
        # development only; /openapi.json is always served.
        docs_url="/docs" if settings.environment == "development" else None,
        redoc_url="/redoc" if settings.environment == "development" else None,
    )
    errors.install(app)
    if settings.api.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.api.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )

    app.include_router(health.router)
    install_views(app, settings, load_views(settings))
    app.include_router(events.events_router(settings))
    app.include_router(reports.router)
    app.include_router(admin.router)

    @app.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        return Response(request.app.state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    # Outermost of all, outside Starlette's own error middleware too: a 500 it answers gets the same
    # headers as every other answer.
    build = app.build_middleware_stack
    hosts = settings.api.host_names()
    app.build_middleware_stack = lambda: HeadersAndLatency(build(), hosts)  # type: ignore[method-assign]

    # The dashboard: markup, script (dashboard.js puts data in the page only as text) and style are files.
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def dashboard() -> HTMLResponse:
        return HTMLResponse((STATIC / "dashboard.html").read_text())

    return app
