"""Run the query API with uvicorn: `python -m api.server` (`lambdactl up` does)."""

from __future__ import annotations

import errno
import gc
import logging
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from api import worker_sync
from definitions.logs import configure_from
from definitions.settings import Settings, get_settings, process_settings
from definitions.settings_store import read_snapshot, write_snapshot

if TYPE_CHECKING:
    from fastapi import FastAPI


def main() -> int:
    import uvicorn

    from api.app import InsecureSettings, check_settings, create_app
    from api.http_protocol import BoundedHttpToolsProtocol

    settings = process_settings("api")
    configure_from("api", settings)
    try:
        check_settings(settings)
    except InsecureSettings as exc:
        logging.getLogger("lambda.api").error("refusing to start: %s", exc)
        return 2
    where = f"{settings.api.host}:{settings.api.port}"
    if not _can_bind(settings.api.host, settings.api.port):
        # Before the workers' directory is emptied: it is the running API's, on this port.
        logging.getLogger("lambda.api").error(
            "refusing to start: %s is in use (another API, or the workers of one whose main process "
            "was killed); stop it first (`lambdactl down`, or end the processes listening there)",
            where,
        )
        return 1
    # uvloop and httptools: the event loop and HTTP parser in C (uvicorn's pure-Python ones cost a
    # large share of each query's CPU); each request's head bounded (api.http_protocol).
    serve = dict(
        host=settings.api.host,
        port=settings.api.port,
        loop="uvloop",
        http=BoundedHttpToolsProtocol,
        log_config=None,
        access_log=False,
    )
    if settings.api.workers == 1:
        app = create_app(settings)
        quiet_full_collections()
        uvicorn.run(app, **serve)  # type: ignore[arg-type]
        return 0
    # Worker processes, each made by worker_app(); uvicorn starts one again if it dies. Their
    # Prometheus metrics are summed from files (prometheus_client's multiprocess mode, chosen by this
    # variable when a worker imports it).
    directory = workers_dir(settings)
    worker_sync.prepare(directory)
    worker_sync.prepare(metrics_dir(directory))
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir(directory))
    # Every worker runs with the settings checked here, also one uvicorn starts again later: loading
    # settings.json then (changed since by an `up` or `views apply`) made workers of one API answer
    # with different tokens and limits, the new ones unchecked.
    snapshot = directory / f"settings-{os.getpid()}.json"  # this API's own: another on the port fails to bind
    os.environ[SNAPSHOT_VARIABLE] = str(write_snapshot(settings, snapshot))
    uvicorn.run("api.server:worker_app", factory=True, workers=settings.api.workers, **serve)  # type: ignore[arg-type]
    return 0


def _can_bind(host: str, port: int) -> bool:
    """Whether this process could listen on host:port now, bound as uvicorn binds it (IPv6 when the
    host holds a ':', else IPv4; SO_REUSEADDR, so a closed connection's TIME_WAIT does not count).
    False only when the address is in use: any other error is left to uvicorn's own start to say."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.errno != errno.EADDRINUSE
    return True


# The file of the settings the API's main process checked, which its workers run with.
SNAPSHOT_VARIABLE = "LAMBDA_API_SETTINGS"


def workers_dir(settings: Settings) -> Path:
    return settings.state_dir / "run" / f"api-{settings.api.port}"


def metrics_dir(directory: Path) -> Path:
    return directory / "metrics"


def worker_app() -> FastAPI:
    """One worker process's app (api.workers > 1): it follows the views reloads of the others."""
    from api.app import create_app

    snapshot = os.environ.get(SNAPSHOT_VARIABLE)
    settings = read_snapshot(Path(snapshot)) if snapshot else get_settings()
    configure_from("api", settings)
    directory = workers_dir(settings)
    app = create_app(settings, worker_sync.WorkerSync(directory), metrics_dir(directory))
    quiet_full_collections()
    return app


# Full collections run once every this many younger ones at most (Python's default: 10).
FULL_COLLECTION_EVERY = 100


def quiet_full_collections() -> None:
    """Keep Python's full garbage collections off the request path: what start-up made (modules,
    the app, the routes: some 70,000 objects) is moved out of the collector's sight, and full
    collections are made rarer. Each full collection stops every request; under 500 queries/s
    they came about every 3 s and took 25–90 ms, most of the API's p99 (bench/api_load.py). The
    young generations are collected as before, so short-lived cycles are freed as soon."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)


if __name__ == "__main__":
    sys.exit(main())
