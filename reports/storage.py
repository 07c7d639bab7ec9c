"""Where reports live: the one place they are stored, listed and read back.

`<state_dir>/reports/<id>.json` and `<id>.html` (what the API serves and `lambdactl report` lists),
with a copy of both on HDFS under /lambda/reports/. An id is [A-Za-z0-9_.-]{1,100} (reports.build
makes them sortable by creation); anything else is refused before a path is made of it.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import NamedTuple

from cachetools import LRUCache

from definitions.settings import Settings

HDFS_DIR = "/lambda/reports"
ID_PATTERN = r"^[A-Za-z0-9_.-]{1,100}$"
_ID = re.compile(ID_PATTERN)


class InvalidReportId(ValueError):
    """Not a report id: never looked up."""


class ReportNotFound(LookupError):
    """No report stored under this id."""


class StoredReport(NamedTuple):
    id: str
    report: dict


def reports_dir(settings: Settings) -> Path:
    return settings.state_dir / "reports"


def check_id(report_id: str) -> str:
    if not isinstance(report_id, str) or not _ID.fullmatch(report_id):
        raise InvalidReportId(f"bad report id {report_id!r}")
    return report_id


def store_report(settings: Settings, report: dict, html: str) -> dict[str, str]:
    """Write `<id>.json` and `<id>.html` under state_dir/reports (what the API serves) and a copy on
    HDFS under /lambda/reports/; their paths."""
    from stores.webhdfs import WebHdfs

    rid = check_id(report["id"])
    folder = reports_dir(settings)
    folder.mkdir(parents=True, exist_ok=True)
    payload = {".json": json.dumps(report, indent=1, sort_keys=False, default=str).encode(), ".html": html.encode()}
    paths: dict[str, str] = {}
    for suffix, data in payload.items():
        target = folder / f"{rid}{suffix}"
        tmp = folder / f".{rid}{suffix}.tmp"
        tmp.write_bytes(data)
        tmp.replace(target)  # the API never reads a half-written file
        paths[suffix[1:]] = str(target)
    with WebHdfs(settings, timeout_s=30) as fs:
        fs.mkdirs(HDFS_DIR)
        for suffix, data in payload.items():
            fs.write(f"{HDFS_DIR}/{rid}{suffix}", data)
            paths[f"hdfs_{suffix[1:]}"] = f"{settings.hdfs.url}{HDFS_DIR}/{rid}{suffix}"
    return paths


def _report_files(settings: Settings) -> list[Path]:
    """The stored reports' JSON files (named by report id), newest first."""
    folder = reports_dir(settings)
    files = sorted(folder.glob("*.json"), reverse=True) if folder.is_dir() else []
    return [path for path in files if _ID.fullmatch(path.stem)]


def list_reports(settings: Settings, limit: int | None = None) -> list[StoredReport]:
    """The stored reports (full documents), newest first; at most `limit`. Unreadable ones are skipped."""
    out: list[StoredReport] = []
    for path in _report_files(settings):
        if limit is not None and len(out) >= limit:
            break
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            out.append(StoredReport(path.stem, doc))
    return out


LISTED_FIELDS = ("created", "window", "summary")
# What a listing shows of each report file, by (path, modification time, size): a report is parsed
# once, not at every listing (a report is megabytes; the list is asked without a token).
_listed: LRUCache = LRUCache(maxsize=4096)
_listed_lock = threading.Lock()


def list_summaries(settings: Settings, limit: int) -> list[StoredReport]:
    """The newest `limit` reports, each with only LISTED_FIELDS of its document. Unreadable ones are skipped."""
    out: list[StoredReport] = []
    for path in _report_files(settings):
        if len(out) >= limit:
            break
        try:
            stat = path.stat()
            key = (str(path), stat.st_mtime_ns, stat.st_size)
            with _listed_lock:
                fields = _listed.get(key)
            if fields is None:
                try:
                    doc = json.loads(path.read_text())
                except (ValueError, RecursionError):
                    doc = None
                fields = {name: doc.get(name) for name in LISTED_FIELDS} if isinstance(doc, dict) else {}
                with _listed_lock:
                    _listed[key] = fields  # {}: not a report, and not read again while unchanged
        except OSError:
            continue
        if fields:
            out.append(StoredReport(path.stem, fields))
    return out


def _path(settings: Settings, report_id: str, suffix: str) -> Path:
    path = reports_dir(settings) / f"{check_id(report_id)}{suffix}"
    if not path.is_file():
        raise ReportNotFound(f"no report {report_id!r}")
    return path


def read_report(settings: Settings, report_id: str) -> dict:
    """A stored report's document. Raises InvalidReportId, ReportNotFound."""
    return json.loads(_path(settings, report_id, ".json").read_text())


def read_report_html(settings: Settings, report_id: str) -> str:
    """A stored report's HTML page. Raises InvalidReportId, ReportNotFound."""
    return _path(settings, report_id, ".html").read_text()
