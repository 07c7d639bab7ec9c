"""Fixtures for both kinds of tests: the settings, one local Spark session, unique names.

tests/unit/ needs no service (`make unit`); tests/integration/ runs against the real local stack
(its conftest brings it up once, idempotently); `make test` runs both."""

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
def spark(settings: Settings):
    """One Spark session for the whole run (tests that touch HDFS also ask for `stack`)."""
    from definitions.spark import spark_session
    from stores.batch_bulk_load import chosen_load, session_options

    options = {"spark.sql.shuffle.partitions": "2"}
    if chosen_load(settings) == "bulk":  # run_batch refuses a session without the bulk load's classes
        # so every test session carries HBase's jars, as only the batch layer's sessions do outside tests
        options.update(session_options(settings))
    session = spark_session(settings, "lambda-tests", options)
    yield session
    session.stop()


@pytest.fixture
def unique() -> str:
    """A short unique suffix for names a test creates in a shared store."""
    return uuid.uuid4().hex[:10]
