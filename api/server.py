"""Run the query API with uvicorn: `python -m api.server` (`lambdactl up` does)."""

from __future__ import annotations

import logging
import sys

from definitions.settings import get_settings


def main() -> int:
    import uvicorn

    from api.app import InsecureSettings, create_app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("kafka", "cassandra", "httpx", "happybase", "thriftpy2"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    settings = get_settings()
    try:
        app = create_app(settings)
    except InsecureSettings as exc:
        logging.getLogger("lambda.api").error("refusing to start: %s", exc)
        return 2
    uvicorn.run(app, host=settings.api.host, port=settings.api.port, log_level="info", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
