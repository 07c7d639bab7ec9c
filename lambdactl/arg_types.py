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


def given(text: str) -> str:
    """An argparse type: a value that is not empty or blanks (an unset shell variable, `--from "$F"`,
    meant the option's default without a word), as given."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty (an unset variable?): leave the option out for its default")
    return text


MAX_LOG_LINES = 100_000


def log_lines(text: str) -> int:
    """An argparse type: how many lines of a log to show, 1 to MAX_LOG_LINES."""
    value = at_least_one(text)
    if value > MAX_LOG_LINES:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_LOG_LINES:,}: {text[:40]!r}")
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


# The options a parse has met so far, kept on its namespace while it runs (Parser takes it off).
_GIVEN = "_given_options"


class _StoreOnce(argparse._StoreAction):
    """An option that takes a value, refused when given twice (the last value was taken without a
    word: `batch --views a --views b` recomputed b alone)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault(_GIVEN, set())
        if self.dest in given:
            raise argparse.ArgumentError(self, "given more than once: give it once (a list takes commas)")
        given.add(self.dest)
        super().__call__(parser, namespace, values, option_string)


class Parser(argparse.ArgumentParser):
    """lambdactl's parser and its sub-commands': an option that takes a value is given at most once."""

    def parse_known_args(self, args=None, namespace=None):
        for action in self._actions:  # its groups' too: they share the list
            if type(action) is argparse._StoreAction and action.option_strings:
                action.__class__ = _StoreOnce
        parsed, rest = super().parse_known_args(args, namespace)
        parsed.__dict__.pop(_GIVEN, None)
        return parsed, rest
