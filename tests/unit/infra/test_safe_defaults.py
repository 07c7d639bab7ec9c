"""Outside an explicit development mode nothing starts with the development credentials."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from definitions.settings import AirflowSettings, ApiSettings, Settings, default_secrets
from infra.errors import StackError
from infra.stack import Stack


def test_production_is_the_default(monkeypatch):
    monkeypatch.delenv("LAMBDA_ENVIRONMENT", raising=False)
    assert Settings().environment == "production"


def test_up_refuses_default_secrets_before_starting_anything(tmp_path):
    settings = Settings(environment="production", state_dir=tmp_path / "state")
    with pytest.raises(StackError, match=r"api\.token .*airflow\.admin_password .*development defaults"):
        Stack(settings).up()
    assert not (tmp_path / "state" / "run").exists(), "nothing was started"
    assert not (tmp_path / "state" / "settings.json").exists(), "nothing was persisted"


def test_secrets_set_or_development_mode_pass_the_check():
    secret = Settings(
        environment="production",
        api=ApiSettings(token=SecretStr("t0k3n-long-enough-42")),
        airflow=AirflowSettings(admin_password=SecretStr("pw")),
    )
    assert default_secrets(secret) == []
    assert default_secrets(Settings(environment="development")) == [
        "api.token (LAMBDA_API__TOKEN)",
        "airflow.admin_password (LAMBDA_AIRFLOW__ADMIN_PASSWORD)",
    ]


@pytest.mark.parametrize(
    "token",
    [
        "",
        " ",
        "                    ",
        "short-token",
        "has a space in it!!",
        "ünïcödé-token-value-1",
        "line\nbreak-token-value",
    ],
)
def test_a_token_no_client_can_send_or_anyone_can_guess_is_refused_naming_the_setting(token, monkeypatch):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"api\.token must be at least 16 characters"):
        ApiSettings(token=SecretStr(token))
    monkeypatch.setenv("LAMBDA_API__TOKEN", token)
    with pytest.raises(ValidationError, match=r"api\.token"):
        Settings()


def test_a_bearer_token_is_accepted():
    for token in ("dev-token-change-me", "Zm9vYmFyYmF6cXV4cXV1eA==", "a.b_c~d+e/f-0123456789"):
        assert ApiSettings(token=SecretStr(token)).token.get_secret_value() == token
