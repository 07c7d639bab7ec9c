"""How lambdactl speaks: progress for a person on stderr, JSON documents for programs on stdout."""

from __future__ import annotations

import json
import logging
import sys

log = logging.getLogger("lambdactl")

# What holds the state directory's views.lock, as a command waiting for it says.
VIEWS_LOCK_HOLDERS = "lambdactl views apply or reset-speed"


def _say(message: str) -> None:
    log.info("%s", message)


def _emit(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
