"""One logging set-up for every process of the platform.

Each process calls `configure(component, settings)` once, at the start of its `main`; nothing else
configures logging. Every line names the component, and the batch run id and version once a batch
run has bound them (`bind(run=..., version=...)`), so lines of several processes interleaved in
one place (the supervisor's logs, a log shipper) still say who wrote them and for which run:

    2026-11-23T22:40:01Z INFO speed-layer lambda.speed run=- version=-: batch 12: 40 rows upserted

`logging.format = "json"` writes one JSON object per line instead (time, level, component, logger,
run, version, message). Drivers that talk a lot (kafka, cassandra, happybase, thriftpy2, py4j,
httpx) log warnings and worse only, unless the level is DEBUG. A warning or error repeated more
than REPEATS_PER_WINDOW times a minute in the API is counted instead of written (_Repeats).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Any

NOISY = ("kafka", "cassandra", "happybase", "thriftpy2", "py4j", "httpx", "httpcore", "hdfs")
# Of those, the ones whose lines below WARNING carry secrets, at every level asked: py4j logs every
# command it sends the JVM (spark.authenticate.secret, a Kafka SASL password in the source's options),
# HdfsCLI its client's address (WebHDFS credentials in it).
SECRET_BEARING = ("py4j", "hdfs")

_fields: dict[str, Any] = {"component": "-", "run": "-", "version": "-"}
_installed: logging.Handler | None = None


class _Context(logging.Filter):
    """Adds the process's component, run id and version to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _fields.items():
            setattr(record, key, value)
        return True


# The API's warnings and errors of one kind (logger, level, message template) beyond this many a
# minute are counted, not written: a client that makes every request fail (a store down, malformed
# heads) would otherwise rotate the log, and what came before, away. The next line of that kind
# says how many. Any process's line logged with `extra=REPEATS` (one a client causes at will) too.
# Other processes write every line (a job's warnings each name something: a partition, a gap).
REPEATS_PER_WINDOW = 20
REPEAT_WINDOW_S = 60.0
REPEATS = {"repeats": True}
_KINDS_KEPT = 1_000  # kinds tracked at once (a template holding data makes each line its own kind)


class _Repeats(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.kinds: dict[tuple[str, int, str], list] = {}  # kind -> [window start, written, held back]

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "repeats", False) and (
            record.levelno < logging.WARNING or _fields["component"] != "api"
        ):
            return True
        kind = (record.name, record.levelno, str(record.msg)[:200])
        now = time.monotonic()
        with self.lock:
            seen = self.kinds.get(kind)
            if seen is None or now - seen[0] >= REPEAT_WINDOW_S:
                held = seen[2] if seen is not None else 0
                if len(self.kinds) >= _KINDS_KEPT and seen is None:
                    self.kinds.clear()
                self.kinds[kind] = [now, 1, 0]
                if held:
                    record.msg = f"{record.msg} [{held} more like this in {REPEAT_WINDOW_S:.0f}s were not logged]"
                return True
            if seen[1] < REPEATS_PER_WINDOW:
                seen[1] += 1
                return True
            seen[2] += 1
            return False


class _Text(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return time.strftime(datefmt or "%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))

    def __init__(self, clock: str) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s %(component)s %(name)s run=%(run)s version=%(version)s: %(message)s",
            datefmt=clock,
        )


class _Short(logging.Formatter):
    """For a person at a terminal (lambdactl): the time of day, the level, the logger, the message."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")


class _Json(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created)),
            "level": record.levelname,
            "component": getattr(record, "component", "-"),
            "logger": record.name,
            "run": getattr(record, "run", "-"),
            "version": getattr(record, "version", "-"),
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def configure(component: str, level: str = "INFO", fmt: str = "text", stream=None) -> None:
    """Configure the root logger of this process: one handler on stderr (or `stream`). `fmt` is
    "text", "json" or "short" (a terminal's). Calling it again replaces the handler it installed before."""
    _fields.update(component=component, run="-", version="-")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(_Context())
    handler.addFilter(_Repeats())
    handler.setFormatter(_Json() if fmt == "json" else _Short() if fmt == "short" else _Text("%Y-%m-%dT%H:%M:%SZ"))
    global _installed
    root = logging.getLogger()
    if _installed is not None:  # only ours: a harness's handlers (pytest's caplog) stay
        root.removeHandler(_installed)
    root.addHandler(handler)
    _installed = handler
    root.setLevel(level.upper())
    for name in NOISY:
        debug = level.upper() == "DEBUG" and name not in SECRET_BEARING
        logging.getLogger(name).setLevel(logging.DEBUG if debug else logging.WARNING)


def configure_from(component: str, settings, stream=None) -> None:
    """`configure` with the level and format of `settings.logging`."""
    configure(component, settings.logging.level, settings.logging.format, stream)


def bind(**fields: Any) -> None:
    """Name the batch run (`run=`) and version (`version=`) in every later line of this process."""
    _fields.update({k: ("-" if v is None else v) for k, v in fields.items()})
