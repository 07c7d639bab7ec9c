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
        api=ApiSettings(token=SecretStr("t0k3n")),
        airflow=AirflowSettings(admin_password=SecretStr("pw")),
    )
    assert default_secrets(secret) == []
    assert default_secrets(Settings(environment="development")) == [
        "api.token (LAMBDA_API__TOKEN)",
        "airflow.admin_password (LAMBDA_AIRFLOW__ADMIN_PASSWORD)",
    ]
