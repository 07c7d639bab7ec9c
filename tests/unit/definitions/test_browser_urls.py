"""Addresses the platform hands a browser (the Airflow UI's report links, the recompute route's
run address) are ones a browser reaches: `http://0.0.0.0:8000` and a container's own host name
(`http://api:8000` under docker-compose) were not."""

from __future__ import annotations

import pytest

from definitions.section import browser_url
from definitions.settings import Settings
from infra.airflow import environment


def test_a_service_listening_everywhere_is_reached_on_the_loopback_and_a_public_url_wins(tmp_path):
    assert browser_url("0.0.0.0", 8000, "") == "http://127.0.0.1:8000"
    assert browser_url("10.0.0.5", 8000, "") == "http://10.0.0.5:8000"
    assert browser_url("api", 8000, "https://lambda.example.org/") == "https://lambda.example.org"
    settings = Settings(
        _env_file=None, state_dir=tmp_path, api={"host": "0.0.0.0", "public_url": "http://127.0.0.1:8000"}
    )
    assert environment(settings)["LAMBDA_API_URL"] == "http://127.0.0.1:8000"


@pytest.mark.parametrize(
    "url", ["javascript:alert(1)", "http://a b", "http://host/?q=1", "ftp://host", "http://host/#x", "http://"]
)
def test_a_public_url_is_an_http_address_and_nothing_else(tmp_path, url):
    with pytest.raises(ValueError, match="public_url"):
        Settings(_env_file=None, state_dir=tmp_path, api={"public_url": url})
