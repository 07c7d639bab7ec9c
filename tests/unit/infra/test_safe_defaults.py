"""Outside an explicit development mode nothing starts with the development credentials."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from definitions.service_settings import AirflowSettings, ApiSettings
from definitions.settings import Settings, default_secrets
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


def test_event_limits_that_allow_a_key_no_store_can_hold_are_refused():
    """A valid event whose url fills 9,000 four-byte characters made a 36 KB HBase row key: every
    batch run failed on it, for good (the master dataset keeps it)."""
    from pydantic import ValidationError

    from definitions.layer_settings import MAX_KEY_BYTES, EventLimits
    from stores.batch_layout import encode_key

    with pytest.raises(ValidationError, match=r"events\.max_record_bytes .*max_url_chars"):
        EventLimits(max_url_chars=9_000, max_record_bytes=100_000)
    big_records = EventLimits(max_record_bytes=1_000_000)  # the fields' own limits bound the key
    small_records = EventLimits(max_url_chars=100_000, max_referrer_chars=100_000)  # one record bounds it
    for limits in (EventLimits(), big_records, small_records):
        worst = "\U0001f600" * (min(limits.max_record_bytes, 4 * limits.max_url_chars) // 4)
        assert len(encode_key([worst]) + b"\0" * 9) <= 32_767
        assert len(worst.encode()) <= MAX_KEY_BYTES


def test_the_development_token_is_no_admin_token_outside_development():
    """It is printed in the repository: as `api.admin_token` it opened the admin routes to anyone."""
    from api.app import InsecureSettings, check_settings
    from definitions.service_settings import DEFAULT_TOKEN

    settings = Settings(
        environment="production",
        api=ApiSettings(token=SecretStr("t0k3n-long-enough-42"), admin_token=SecretStr(DEFAULT_TOKEN)),
        airflow=AirflowSettings(admin_password=SecretStr("pw")),
    )
    assert default_secrets(settings) == ["api.admin_token (LAMBDA_API__ADMIN_TOKEN)"]
    with pytest.raises(InsecureSettings, match="api.admin_token"):
        check_settings(settings)


def test_outside_development_the_api_says_when_producers_hold_the_admin_routes_too(caplog):
    """Without `api.admin_token` the admin routes take `api.token`: anyone who sends events can start
    a full recomputation or reload the views. Said at every start, where it was said nowhere."""
    from api.app import check_settings

    tokens = {"token": SecretStr("t0k3n-long-enough-42")}
    for admin, said in (("", True), ("admin-t0k3n-long-enough", False)):
        caplog.clear()
        settings = Settings(environment="production", api=ApiSettings(**tokens, admin_token=SecretStr(admin)))
        check_settings(settings)
        assert ("api.admin_token is unset" in caplog.text) is said, caplog.text


def test_up_refuses_a_short_airflow_password_outside_development(tmp_path):
    """Airflow's login is a password only (its simple auth manager has no lock-out): one of a few
    characters is guessed by trying."""
    from definitions.settings import MIN_PASSWORD_CHARS, weak_password

    tokens = ApiSettings(token=SecretStr("t0k3n-long-enough-42"))
    short = "x" * (MIN_PASSWORD_CHARS - 1)
    settings = Settings(
        environment="production",
        state_dir=tmp_path / "state",
        api=tokens,
        airflow=AirflowSettings(admin_password=SecretStr(short)),
    )
    with pytest.raises(StackError, match=rf"airflow\.admin_password .*at least {MIN_PASSWORD_CHARS} characters"):
        Stack(settings).up()
    assert not (tmp_path / "state" / "run").exists(), "nothing was started"
    assert short not in (weak_password(settings) or ""), "the message never carries the password"
    long_enough = AirflowSettings(admin_password=SecretStr(short + "y"))
    assert weak_password(settings.model_copy(update={"airflow": long_enough})) is None
    assert weak_password(settings.model_copy(update={"environment": "development"})) is None
