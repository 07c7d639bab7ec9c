"""Argument types of `lambdactl`'s options: each refuses, naming why, what the command could not use."""

from __future__ import annotations

import argparse
import math


def iso_time(text: str) -> str:
    """An argparse type: the text as given once it reads as an ISO 8601 time (definitions.times)."""
    from definitions.times import parse_iso_ms

    try:
        parse_iso_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def finite(text: str) -> float:
    """An argparse type: a number that is neither NaN nor infinite (a timeout of `nan` never ran out:
    every comparison with it is false)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text[:40]!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number: {text[:40]!r}")
    return value


def positive(text: str) -> float:
    """An argparse type: a finite number above 0 (seconds to wait)."""
    value = finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0: {text[:40]!r}")
    return value


def at_least_one(text: str) -> int:
    """An argparse type: a whole number of 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number: {text[:40]!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more: {text[:40]!r}")
    return value
