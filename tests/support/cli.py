"""Running `lambdactl` as an operator would, in a subprocess with the stack's data-shaping settings."""

from __future__ import annotations

import os
import subprocess
import sys


def env(settings) -> dict[str, str]:
    return dict(
        os.environ,
        LAMBDA_INGEST_BUCKET_S=str(settings.ingest_bucket_s),
        LAMBDA_SPEED__DEDUPE_WINDOW_S=str(settings.speed.dedupe_window_s),
        # How long a replay keeps replaced rows follows it: as the stack's API reads the marks.
        LAMBDA_API__SPEED_RECHECK_S=str(settings.api.speed_recheck_s),
    )


def lambdactl(settings, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lambdactl.cli", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env={**env(settings), **(extra_env or {})},
    )


def restore_views_args(declared) -> list[str]:
    """`lambdactl views apply` arguments that declare `declared` (a ViewsSettings) again: an empty
    `--modules` or `--paths` is refused as a likely unset variable, so none is said with `--no-modules`
    or `--no-paths`."""
    modules = ["--modules", ",".join(declared.modules)] if declared.modules else ["--no-modules"]
    paths = ["--paths", ",".join(map(str, declared.paths))] if declared.paths else ["--no-paths"]  # "" is refused too
    return [*modules, *paths]
