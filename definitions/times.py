"""How the platform writes a moment for people and JSON: ISO 8601, UTC, whole seconds, `Z`."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache


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
