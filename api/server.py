"""Run the query API with uvicorn: `python -m api.server` (`lambdactl up` does)."""

from __future__ import annotations

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


if __name__ == "__main__":
    sys.exit(main())
