"""The admin routes can take a token of their own (`api.admin_token`): event producers hold
`api.token`, and with it could trigger batch recomputations and reload the served views. Unset, the
admin routes take `api.token`, as before. No service: answered before Airflow or any store."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from definitions.service_settings import ApiSettings
from tests.support.tripwire_api import make_client

PRODUCER = "producer-token-0123456789"
ADMIN = "admin-token-9876543210abcdef"


def client_with(settings, admin: str = ""):
    api = settings.api.model_copy(update={"token": SecretStr(PRODUCER), "admin_token": SecretStr(admin)})
    return make_client(settings.model_copy(update={"api": api}))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def test_with_an_admin_token_the_producers_token_opens_no_admin_route(settings):
    for client in client_with(settings, ADMIN):
        # Malformed bodies: a 422 means the token was taken, a 401 that it was not.
        assert client.post("/api/v1/admin/recompute", content=b"{", headers=bearer(PRODUCER)).status_code == 401
        assert client.post("/api/v1/admin/views/reload", headers=bearer(PRODUCER)).status_code == 401
        assert client.post("/api/v1/admin/recompute", content=b"{", headers=bearer(ADMIN)).status_code == 422
        # ... and the admin token is no producer's.
        assert client.post("/api/v1/events", content=b"[", headers=bearer(ADMIN)).status_code == 401
        assert client.post("/api/v1/events", content=b"[", headers=bearer(PRODUCER)).status_code == 400


def test_without_one_the_admin_routes_take_the_api_token(settings):
    for client in client_with(settings):
        assert client.post("/api/v1/admin/recompute", content=b"{", headers=bearer(PRODUCER)).status_code == 422


@pytest.mark.parametrize("bad", ["short", "has space in it 0123456789", "x" * 15])
def test_an_admin_token_is_a_bearer_token_too(bad):
    with pytest.raises(ValueError, match="api.admin_token"):
        ApiSettings(token=SecretStr(PRODUCER), admin_token=SecretStr(bad))
    with pytest.raises(ValueError, match="differ"):
        ApiSettings(token=SecretStr(PRODUCER), admin_token=SecretStr(PRODUCER))
