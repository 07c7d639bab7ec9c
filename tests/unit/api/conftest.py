"""The API app with a tripwire serving layer, one per test module (tests/support/tripwire_api.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.support.tripwire_api import make_client


@pytest.fixture(scope="module")
def client(settings) -> Iterator[TestClient]:
    yield from make_client(settings)
