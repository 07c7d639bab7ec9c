"""What the supervisor reports about restarts: the listener's status file and its report.

supervisord runs the stack's processes, stores included (infra/supervision.py); its own `autorestart` restarts
at once and without limit, so restarts are decided here instead, by the event listener
(infra/restart_listener.py; the policy is infra.restarts.Budget): after an exit, wait `restart_backoff_s`, doubled for every restart
already made within `restart_window_s` (at most `restart_backoff_max_s`); once `restart_max`
restarts were made within the window, the next exit is a restart loop and the process is given up.

The listener keeps what it knows in one JSON file, `<state_dir>/supervisor/restarts.json`
(replaced atomically, written by the listener only); `restart_report` reads it for `lambdactl
status` and the API's /health.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from pathlib import Path
from typing import Any

from definitions.files import write_private
from definitions.settings import Settings

log = logging.getLogger(__name__)

FILE_NAME = "restarts.json"


def supervisor_dir(state_dir: Path) -> Path:
    return state_dir / "supervisor"


def status_path(state_dir: Path) -> Path:
    return supervisor_dir(state_dir) / FILE_NAME


def new_entry() -> dict[str, Any]:
    """What the listener keeps about one process."""
    return {
        "state": "unknown",  # supervisord's state name, or "restarting" / "gave up"
        "pid": None,
        "since": None,  # when it entered `state` (epoch seconds)
        "restarts": 0,  # restarts the supervisor made since this process was last started by hand
        "restarts_total": 0,  # restarts the supervisor made since it started
        "recent": [],  # times of the restarts that count against the budget
        "started_at": None,  # when it was last started (by hand or by a restart)
        "last_restart_at": None,
        "next_restart_at": None,
        "gave_up_at": None,
        "last_exit": None,  # {"at", "reason", "uptime_s", "log_tail"}
    }


def read_status(state_dir: Path) -> dict[str, Any]:
    """The listener's file, or an empty document when there is none (or it cannot be read); an
    entry of a field of another type (written by hand, damaged) is passed over, named in the log:
    `status`, /health and the listener read every field as written here."""
    try:
        doc = json.loads(status_path(state_dir).read_text())
    except (OSError, ValueError):
        return {"processes": {}}
    if not isinstance(doc, dict) or not isinstance(doc.get("processes"), dict):
        return {"processes": {}}
    bad = [name for name, entry in doc["processes"].items() if not _well_formed(entry)]
    if bad:
        log.warning(
            "%s: passed over the entries of %s, not as the restart listener writes them", status_path(state_dir), bad
        )
    doc["processes"] = {name: entry for name, entry in doc["processes"].items() if name not in bad}
    return doc


_TIMES = ("since", "started_at", "last_restart_at", "next_restart_at", "gave_up_at", "restart_asked_at")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _well_formed(entry: Any) -> bool:
    """Whether a process's entry has each field of the type new_entry and the listener give it."""
    if not isinstance(entry, dict) or not isinstance(entry.get("state", ""), str):
        return False
    if not all(entry.get(k) is None or _number(entry[k]) for k in _TIMES):
        return False
    if not all(_count(entry.get(k, 0)) for k in ("restarts", "restarts_total")):
        return False
    recent, pid, session = entry.get("recent", []), entry.get("pid"), entry.get("session")
    if not isinstance(recent, list) or not all(_number(t) for t in recent):
        return False
    if pid is not None and not (_count(pid) and pid > 0):
        return False
    if session is not None and not (isinstance(session, list) and len(session) == 2 and all(map(_number, session))):
        return False
    last = entry.get("last_exit")
    if last is None:
        return True
    tail = last.get("log_tail", []) if isinstance(last, dict) else None
    return (
        isinstance(last, dict)
        and all(last.get(k) is None or _number(last[k]) for k in ("at", "uptime_s"))
        and (last.get("reason") is None or isinstance(last["reason"], str))
        and isinstance(tail, list)
        and all(isinstance(line, str) for line in tail)
    )


def write_status(state_dir: Path, doc: dict[str, Any]) -> None:
    """Replace the file atomically: a reader sees the old document or the new one (also after a
    crash); what a listener killed while writing left goes at a later write (definitions.files)."""
    write_private(status_path(state_dir), json.dumps(doc, indent=1, sort_keys=True))


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def summary(entry: dict[str, Any], now: float | None = None) -> str:
    """One line for a person: the restarts of a process and the last reason."""
    now = time.time() if now is None else now
    last = entry.get("last_exit") or {}
    reason = last.get("reason")
    if entry.get("gave_up_at"):
        return (
            f"gave up {now - entry['gave_up_at']:.0f}s ago after {entry.get('restarts', 0)} restart(s) "
            f"(restart loop); last exit: {reason}"
        )
    if entry.get("next_restart_at"):
        return f"restarting in {max(0.0, entry['next_restart_at'] - now):.0f}s after: {reason}"
    if entry.get("restarts_total"):
        ago = now - (entry.get("last_restart_at") or now)
        return f"restarted {entry['restarts_total']}x, last {ago:.0f}s ago after: {reason}"
    return "no restarts"


# The reasons the report gives without `with_log`: supervisord's words for a start that failed
# ("can't find command '/…'") name paths of the host, and the API's /health shows the report.
_PLAIN_REASON = re.compile(
    r"(exit status -?\d{1,5}|terminated by (SIG[A-Z0-9+]{1,12}|signal \d{1,3})( \(core dumped\))?"
    r"|Bad exit code -?\d{1,5}|Exited too quickly \(process log may have details\)"
    r"|exited \(supervisord did not say how\)|unknown termination cause 0x[0-9a-f]{1,8})"
)
NOT_STARTED = "could not be started (the supervisor's log says why)"


def _plain(entry: dict[str, Any]) -> dict[str, Any]:
    """`entry` with its last exit's reason one of the plain ones, or NOT_STARTED."""
    last = entry.get("last_exit") or {}
    reason = last.get("reason")
    if reason is None or _PLAIN_REASON.fullmatch(str(reason)):
        return entry
    return {**entry, "last_exit": {**last, "reason": NOT_STARTED}}


def restart_report(settings: Settings, with_log: bool = False) -> dict[str, dict[str, Any]]:
    """Per supervised process: its state, restarts and the last reason, from the listener's file.

    {"api": {"state": "RUNNING", "restarts": 1, "restarts_total": 1, "last_restart": "2026-…Z",
             "last_reason": "terminated by SIGKILL", "gave_up": False, "next_restart_in_s": None,
             "summary": "restarted 1x, last 12s ago after: terminated by SIGKILL"}, …}

    The reason is the exit status or signal only (a start that failed: NOT_STARTED). `with_log`
    adds the last lines of the process's log (`log_tail`) and supervisord's own words for a start
    that failed, for operators: never put those in an HTTP answer (they may name hosts, ports or
    paths, or carry tracebacks). An empty dict when the supervisor has reported nothing yet.
    """
    now = time.time()
    doc = read_status(settings.state_dir)
    out = {}
    for name, entry in sorted(doc["processes"].items()):
        if not with_log:
            entry = _plain(entry)
        last = entry.get("last_exit") or {}
        row = {
            "state": entry.get("state", "unknown"),
            "restarts": int(entry.get("restarts", 0)),
            "restarts_total": int(entry.get("restarts_total", 0)),
            "last_restart": _iso(entry.get("last_restart_at")),
            "last_exit": _iso(last.get("at")),
            "last_reason": last.get("reason"),
            "gave_up": bool(entry.get("gave_up_at")),
            "next_restart_in_s": (
                round(max(0.0, entry["next_restart_at"] - now), 1) if entry.get("next_restart_at") else None
            ),
            "summary": summary(entry, now),
        }
        if with_log:
            row["log_tail"] = last.get("log_tail", [])
        out[name] = row
    return out
