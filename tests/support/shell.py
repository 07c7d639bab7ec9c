"""A plain operator's shell for tests of settings: no LAMBDA_* variable, an empty working directory
(no lambda.toml), a state directory of the test's own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def plain_shell(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if key.startswith("LAMBDA_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LAMBDA_STATE_DIR", str(tmp_path / "state"))
