"""Where reports live: the one place they are stored, listed and read back.

`<state_dir>/reports/<id>.json` and `<id>.html` (what the API serves and `lambdactl report` lists),
with a copy of both on HDFS under `batch.reports_path`. An id is [A-Za-z0-9_.-]{1,100} (reports.build
makes them sortable by creation); anything else is refused before a path is made of it.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from cachetools import LRUCache

from definitions.settings import Settings

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"  # never `.`, `..` or a hidden (temporary) file's name
_ID = re.compile(ID_PATTERN)
# The ids reports.build makes begin with their creation time: only files so named are listed, counted
# and pruned as reports (a note or a page beside them sorts above them, and was kept as the newest).
_BUILT = re.compile(r"\d{8}T\d{6}[A-Za-z0-9_.-]{0,85}")  # as long as ID_PATTERN allows
STRAY_AFTER_S = 3_600  # a temporary file this old is no build's in flight


class InvalidReportId(ValueError):
    """Not a report id: never looked up."""


class ReportNotFound(LookupError):
    """No report stored under this id."""


class ReportsBusy(RuntimeError):
    """Another request of this process parses a report file, longer than PARSE_WAIT_S: ask again."""


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
    """Write a copy on HDFS under `batch.reports_path`, then `<id>.html` and `<id>.json` under
    state_dir/reports (what the API serves), and drop all but the newest `batch.keep_reports`;
    their paths. HDFS first: a copy that fails (HDFS away) fails the task before the report is
    listed, so its retry does not list a second report of the same run. The page goes before the
    JSON: the list reads the JSON files, so a listed report has its page."""
    from stores.webhdfs import WebHdfs

    rid = check_id(report["id"])
    folder = reports_dir(settings)
    folder.mkdir(parents=True, exist_ok=True)
    # backslashreplace: a lone surrogate (no UTF-8) in the page is written escaped, not a failed store
    payload = {
        ".html": html.encode("utf-8", "backslashreplace"),
        ".json": json.dumps(report, indent=1, sort_keys=False, default=str).encode(),
    }
    paths: dict[str, str] = {}
    with WebHdfs(settings, timeout_s=30) as fs:
        hdfs_dir = settings.batch.reports_path
        fs.mkdirs(hdfs_dir)
        for suffix, data in payload.items():
            fs.write_whole(f"{hdfs_dir}/{rid}{suffix}", data)  # killed half-way: no part under its name
            paths[f"hdfs_{suffix[1:]}"] = f"{settings.hdfs.url}{hdfs_dir}/{rid}{suffix}"
        for name in _beyond(fs.list(hdfs_dir), settings.batch.keep_reports):
            fs.delete(f"{hdfs_dir}/{name}")
    for suffix, data in payload.items():
        target = folder / f"{rid}{suffix}"
        # A name of its own: two builds of one report at once each move a whole file into place.
        tmp = tempfile.NamedTemporaryFile(dir=folder, prefix=f".{rid}{suffix}.", suffix=".tmp", delete=False)
        try:  # a full disk (at the write or at the close's flush): no partial file left at every retry
            with tmp:
                tmp.write(data)
                os.fchmod(tmp.fileno(), 0o644)  # mkstemp's 0600 kept an API of another user from reading it
            Path(tmp.name).replace(target)  # the API never reads a half-written file
        except BaseException:
            Path(tmp.name).unlink(missing_ok=True)
            raise
        paths[suffix[1:]] = str(target)
    _prune_local(folder, settings.batch.keep_reports)
    return paths


def _beyond(names: list[str], keep: int) -> list[str]:
    """The files (names) of the reports older than the newest `keep` (ids sort by creation), with
    what a copy killed while written left beside them (`<id>.html.tmp`)."""
    ids = sorted(
        {
            rid
            for name in names
            if name.endswith((".json", ".html")) and _BUILT.fullmatch(rid := name.rsplit(".", 1)[0])
        },
        reverse=True,
    )
    if not ids:
        return []
    oldest_kept = ids[min(keep, len(ids)) - 1]  # batch.keep_reports >= 1

    def report_id(name: str) -> str:
        return name.removesuffix(".tmp").rsplit(".", 1)[0]

    # A copy another build is writing now is of an id newer than those kept, unless that build began
    # before `keep` later ones were stored (then it fails, and its retry builds it again).
    return [
        name
        for name in names
        if name.removesuffix(".tmp").endswith((".json", ".html"))
        and _BUILT.fullmatch(report_id(name))
        and report_id(name) < oldest_kept
    ]


def _prune_local(folder: Path, keep: int) -> None:
    """Drop the reports beyond the newest `keep`, and temporary files a killed build left."""
    now = time.time()
    for path in folder.iterdir():
        try:
            if path.name.startswith(".") and path.name.endswith(".tmp") and now - path.stat().st_mtime > STRAY_AFTER_S:
                path.unlink()
        except OSError:
            continue
    for name in _beyond([p.name for p in folder.iterdir() if not p.name.startswith(".")], keep):
        (folder / name).unlink(missing_ok=True)


def _report_files(settings: Settings) -> list[Path]:
    """The stored reports' JSON files (named by report id), newest first."""
    folder = reports_dir(settings)
    files = sorted(folder.glob("*.json"), reverse=True) if folder.is_dir() else []
    return [path for path in files if _BUILT.fullmatch(path.stem)]


def list_reports(settings: Settings, limit: int | None = None) -> list[StoredReport]:
    """The stored reports (full documents), newest first; at most `limit`. Unreadable ones are skipped."""
    out: list[StoredReport] = []
    for path in _report_files(settings):
        if limit is not None and len(out) >= limit:
            break
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(doc, dict):
            out.append(StoredReport(path.stem, doc))
    return out


LISTED_FIELDS = ("created", "window", "summary")
# What a listing shows of each report file, by (path, modification time, size): a report is parsed
# once, not at every listing (a report is megabytes; the list is asked without a token).
_listed: LRUCache = LRUCache(maxsize=4096)
_listed_lock = threading.Lock()
# One parse at a time, listing or checking a file: requests at once on a cold cache (an API just
# started, or ids asked one after another past the cache) wait for the one that parses a file, then
# find it cached, instead of each parsing a report of megabytes and holding it. A request waits at
# most PARSE_WAIT_S for its turn, then is refused (ReportsBusy), not left holding a worker thread.
_parse_lock = threading.Lock()
PARSE_WAIT_S = 5.0


@contextmanager
def _parsing() -> Iterator[None]:
    """The parse lock, held; ReportsBusy when it is not free within PARSE_WAIT_S."""
    if not _parse_lock.acquire(timeout=PARSE_WAIT_S):
        raise ReportsBusy("other requests are reading reports; ask again in a few seconds")
    try:
        yield
    finally:
        _parse_lock.release()


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
                fields = _parsed_fields(path, key)
        except OSError:
            continue
        if fields:
            out.append(StoredReport(path.stem, fields))
    return out


def _parsed_fields(path: Path, key: tuple) -> dict:
    """LISTED_FIELDS of the report file at `path` (cache key `key`), parsed by one caller at a time."""
    with _parsing():
        with _listed_lock:
            fields = _listed.get(key)
        if fields is not None:  # parsed while this caller waited
            return fields
        try:
            doc = json.loads(path.read_text())
        except (ValueError, RecursionError):
            doc = None
        fields = {name: doc.get(name) for name in LISTED_FIELDS} if isinstance(doc, dict) else {}
        with _listed_lock:
            _listed[key] = fields  # {}: not a report, and not read again while unchanged
        return fields


def _path(settings: Settings, report_id: str, suffix: str) -> Path:
    path = reports_dir(settings) / f"{check_id(report_id)}{suffix}"
    if not path.is_file():
        raise ReportNotFound(f"no report {report_id!r}")
    return path


def read_report(settings: Settings, report_id: str) -> dict:
    """A stored report's document. Raises InvalidReportId, ReportNotFound (also for a damaged file)."""
    path = _path(settings, report_id, ".json")
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not JSON, or not UTF-8
        raise ReportNotFound(f"report {report_id!r} cannot be read ({type(exc).__name__})") from None
    if not isinstance(doc, dict):
        raise ReportNotFound(f"report {report_id!r} cannot be read (not a report document)")
    return doc


# Report files checked to hold a report document, by (path, inode, modification time, size): the
# API sends a checked file as it is stored, parsing it once rather than at every request.
_checked: LRUCache = LRUCache(maxsize=4096)  # more than the reports kept (batch.keep_reports, 500)
_checked_lock = threading.Lock()


def report_file(settings: Settings, report_id: str) -> Path:
    """The file of a stored report's document, checked once per version of the file to hold one.
    Raises InvalidReportId, ReportNotFound (also for a damaged file). Reports are replaced whole
    (written aside, then renamed), so what is sent is a checked version or a newer one."""
    path = _path(settings, report_id, ".json")
    try:
        stat = path.stat()
    except OSError:
        raise ReportNotFound(f"no report {report_id!r}") from None
    key = (str(path), stat.st_ino, stat.st_mtime_ns, stat.st_size)
    with _checked_lock:
        known = _checked.get(key)
    if known is None:
        with _parsing():
            with _checked_lock:
                known = _checked.get(key)  # checked while this caller waited
            if known is None:
                read_report(settings, report_id)
                with _checked_lock:
                    _checked[key] = True
    return path


def report_html_file(settings: Settings, report_id: str) -> Path:
    """The file of a stored report's HTML page. Raises InvalidReportId, ReportNotFound."""
    path = _path(settings, report_id, ".html")
    if not path.is_file():
        raise ReportNotFound(f"no report {report_id!r}")
    return path


def read_report_html(settings: Settings, report_id: str) -> str:
    """A stored report's HTML page. Raises InvalidReportId, ReportNotFound (also for a damaged file)."""
    try:
        return _path(settings, report_id, ".html").read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportNotFound(f"report {report_id!r} cannot be read ({type(exc).__name__})") from None
