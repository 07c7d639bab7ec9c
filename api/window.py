"""The time window of a view query, parsed and bounded by arithmetic alone.

Nothing here allocates in proportion to the range or touches a store: a time is parsed from its
digits, the window must lie within [api.earliest_query_time_s, now + api.max_query_ahead_s], and
the number of buckets is counted as a division, then compared with api.max_buckets. A query that
passes is small enough to answer; one that does not is a 422 naming the parameter, in microseconds.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date

from api.errors import ApiError
from definitions.service_settings import ApiSettings
from definitions.times import iso_s as iso
from definitions.views import GRANULARITIES, View

DEFAULT_SPAN_BUCKETS = 48

# What a time parameter may be: an RFC 3339 date-time (the ISO-8601 profile OpenAPI calls
# `date-time`) with a zone, seconds, at most 9 fractional digits. Documented as the parameters'
# pattern, and the parser accepts exactly this.
TIME_PATTERN = (
    r"^([0-9]{4})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):([0-5][0-9]):([0-5][0-9])"
    r"(\.[0-9]{1,9})?(Z|([+-])([01][0-9]|2[0-3]):([0-5][0-9]))$"
)
_TIME = re.compile(TIME_PATTERN)
TIME_EXAMPLE = "2026-11-21T10:00:00Z"


@dataclass(frozen=True)
class Window:
    granularity: str
    start_s: int
    end_s: int
    buckets: int


def _shown(text: str) -> str:
    return repr(text[:40] + ("…" if len(text) > 40 else ""))


def parse_time(text: str, name: str, up: bool = False) -> int:
    """Epoch seconds of an RFC 3339 time (a fraction dropped, or with `up` counted as a second
    more), or a 422 naming the parameter. Pure arithmetic on the digits: no year, offset or
    fraction can overflow it."""
    match = _TIME.fullmatch(text)
    if match is None:
        raise ApiError(
            422,
            f"{name}: not an ISO-8601 time with a zone, like {TIME_EXAMPLE}: {_shown(text)}",
            errors=[{"loc": ["query", name], "msg": f"expected a time like {TIME_EXAMPLE}"}],
        )
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    try:
        date(year, month, day)
    except ValueError:
        raise ApiError(
            422, f"{name}: no such date: {_shown(text)}", errors=[{"loc": ["query", name], "msg": "no such date"}]
        ) from None
    offset = 0
    if match.group(8) != "Z":
        offset = (1 if match.group(9) == "+" else -1) * (int(match.group(10)) * 3600 + int(match.group(11)) * 60)
    fraction = 1 if up and (match.group(7) or "").strip(".0") else 0
    return calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)) - offset + fraction


def resolve_window(
    api: ApiSettings, view: View, granularity: str, start: str | None, end: str | None, now_s: int
) -> Window:
    """The query's window, checked: within the allowed span, start before end, at most
    api.max_buckets buckets; then rounded out to whole buckets of the granularity (what is counted,
    and what the answer says it counted). Defaults: end = the end of the current bucket, start = 48
    buckets before end (not before the earliest allowed time)."""
    if granularity not in view.granularities:
        raise ApiError(
            422, f"granularity: view {view.name} is kept at {', '.join(view.granularities)}, not {granularity}"
        )
    size = GRANULARITIES[granularity]
    earliest, latest = api.earliest_query_time_s, now_s + api.max_query_ahead_s
    problems = []
    start_s = parse_time(start, "start") if start is not None else None
    end_s = parse_time(end, "end", up=True) if end is not None else None
    if start is not None and start_s is not None and not earliest <= start_s <= latest:
        problems.append(
            (
                "start",
                f"start: {_shown(start)} is outside the times this API answers for, {iso(earliest)} to {iso(latest)}",
            )
        )
    if end is not None and end_s is not None and not earliest < end_s <= latest:
        problems.append(
            (
                "end",
                f"end: {_shown(end)} is outside the times this API answers for, "
                f"{iso(earliest)} to {iso(latest)} (now + {api.max_query_ahead_s}s)",
            )
        )
    if problems:
        raise ApiError(
            422,
            "; ".join(text for _, text in problems),
            errors=[{"loc": ["query", name], "msg": text} for name, text in problems],
        )
    if end_s is None:
        end_s = now_s - now_s % size + size
    if start_s is None:
        start_s = max(end_s - DEFAULT_SPAN_BUCKETS * size, earliest)
    if start_s >= end_s:
        raise ApiError(
            422,
            f"start ({iso(start_s)}) must be before end ({iso(end_s)})",
            errors=[{"loc": ["query", "start"], "msg": "must be before end"}],
        )
    first = start_s - start_s % size
    buckets = -(-(end_s - first) // size)
    if buckets > api.max_buckets:
        raise ApiError(
            422,
            f"range too large: {buckets} {granularity} buckets from start to end, at most "
            f"{api.max_buckets}; narrow it or use a coarser granularity",
            errors=[{"loc": ["query", "start"], "msg": "range too large"}],
        )
    return Window(granularity, first, first + buckets * size, buckets)
