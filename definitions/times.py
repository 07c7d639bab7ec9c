"""How the platform writes a moment for people and JSON (ISO 8601, UTC, whole seconds, `Z`), and
reads one a person wrote (a cutoff, a start)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import lru_cache

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_s(seconds: int | float) -> str:
    """Epoch seconds → `2026-01-01T00:00:00Z`."""
    whole = int(seconds // 1)
    return _iso_whole(whole) if whole == seconds else _format(seconds)


@lru_cache(maxsize=16_384)  # answers format the same bucket starts again and again
def _iso_whole(seconds: int) -> str:
    return _format(seconds)


def _format(seconds: int | float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_ms(ms: int) -> str:
    """Epoch milliseconds → `2026-01-01T00:00:00Z`."""
    return iso_s(ms / 1000)


def parse_iso_ms(text: str, what: str = "") -> int:
    """An ISO 8601 time a person wrote (`2026-01-01T00:00:00Z`; without a zone: UTC) → epoch ms.
    ValueError saying what is wrong with (the start of) the text otherwise, or for a time before
    1970, after `what: ` when `what` names it (callers that name it themselves leave it out)."""
    shown = repr(text[:60]) + ("…" if len(text) > 60 else "")
    named = f"{what}: " if what else ""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise ValueError(f"{named}not an ISO 8601 time (e.g. 2026-01-01T00:00:00Z): {shown}") from None
    try:  # every message names a time in UTC: one no datetime holds there is none to name
        moment.astimezone(UTC)
    except OverflowError:
        ahead = (moment.utcoffset() or timedelta(0)) > timedelta(0)  # year 1 ahead of UTC: before year 1 there
        raise ValueError(f"{named}{shown} is {'before 1970' if ahead else 'after 9999-12-31T23:59:59Z'}") from None
    ms = (moment - _EPOCH) // timedelta(milliseconds=1)  # in whole numbers: through a float it came out 1 ms early
    if ms < 0:
        raise ValueError(f"{named}{shown} is before 1970")
    return ms
