"""Shared fixtures: the real local stack (brought up once, idempotently) and one Spark session."""

from __future__ import annotations

import logging
import os
import time
import uuid

import pytest

from definitions.settings import Settings, get_settings

# The tests run in development mode explicitly (development token and Airflow password).
os.environ.setdefault("LAMBDA_ENVIRONMENT", "development")

# PySpark hands timestamps to Python as naive local times: make local time UTC, as the platform is.
os.environ["TZ"] = "UTC"
time.tzset()

for _noisy in ("kafka", "cassandra", "happybase", "thriftpy2", "py4j", "httpx"):
    logging.getLogger(_noisy).setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def settings() -> Settings:
    return get_settings()


@pytest.fixture(scope="session")
def stack(settings: Settings):
    """The whole managed stack, healthy and bootstrapped. `up` is a no-op when it already runs."""
    from infra.stack import Stack

    stack = Stack(settings)
    stack.up()
    if "speed-layer" in settings.stack.managed_services:
        from ingest.streaming_progress import read_progress

        running = read_progress(settings, "speed-layer")
        for name, ours in (
            ("ingest_bucket_s", settings.ingest_bucket_s),
            ("dedupe_window_s", settings.speed.dedupe_window_s),
        ):
            if running.get(name) != ours:
                pytest.exit(
                    f"the stack's speed layer runs with {name}={running.get(name)}, the tests with {ours}: "
                    "run `make down` and then `make test`",
                    returncode=2,
                )
    return stack


@pytest.fixture(scope="session")
def spark(settings: Settings):
    """One Spark session for the whole run (tests that touch HDFS also ask for `stack`)."""
    from definitions.spark import spark_session

    session = spark_session(settings, "lambda-tests", {"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium (Debian's package, installed by infra/setup.sh) driven by Playwright."""
    import shutil

    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    assert executable, "Debian's chromium is installed by infra/setup.sh"
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=executable,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield browser
        browser.close()


@pytest.fixture
def unique() -> str:
    """A short unique suffix for names a test creates in a shared store."""
    return uuid.uuid4().hex[:10]
