"""The API app with a tripwire serving layer, one per test module (tests/support/tripwire_api.py)."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.support.shell import plain_shell
from tests.support.tripwire_api import make_client


@pytest.fixture(scope="module")
def client(settings) -> Iterator[TestClient]:
    yield from make_client(settings)


@pytest.fixture
def module(tmp_path, monkeypatch):
    """A view module in a directory of its own; (directory, module name)."""
    plain_shell(monkeypatch, tmp_path)
    monkeypatch.setenv("LAMBDA_ENVIRONMENT", "development")
    folder = tmp_path / "views"
    folder.mkdir()
    name = f"extra_views_{uuid.uuid4().hex[:8]}"
    (folder / f"{name}.py").write_text(
        textwrap.dedent(
            """
            from definitions.views import View

            VIEWS = [View(name="clicks", keys=("url",), aggregation="count", where="event_type = 'click'",
                          granularities=("hour", "day"))]
            """
        )
    )
    return folder, name
