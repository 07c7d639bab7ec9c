"""Run the query API with uvicorn: `python -m api.server` (`lambdactl up` does)."""

from __future__ import annotations

import gc
import logging
import sys

from definitions.logs import configure_from
from definitions.settings import get_settings


def main() -> int:
    import uvicorn

    from api.app import InsecureSettings, create_app

    settings = get_settings()
    configure_from("api", settings)
    try:
        app = create_app(settings)
    except InsecureSettings as exc:
        logging.getLogger("lambda.api").error("refusing to start: %s", exc)
        return 2
    quiet_full_collections()
    # uvloop and httptools: the event loop and HTTP parser in C (uvicorn's pure-Python ones cost a
    # large share of each query's CPU).
    uvicorn.run(
        app,
        host=settings.api.host,
        port=settings.api.port,
        loop="uvloop",
        http="httptools",
        log_config=None,
        access_log=False,
    )
    return 0


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
