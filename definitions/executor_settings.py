"""The settings a Spark task carries to its executor: a function run in an executor's Python worker
(a writer of a store) is pickled with what it refers to into every task, and on a cluster sent to
the workers over the network. The settings go without the secrets no executor uses: the API's
tokens, Airflow's admin password and database address, Kafka's SASL password (the executors'
Kafka reads are the JVM's, configured by the driver). The stores' own credentials stay: the
executors write with them."""

from __future__ import annotations

from pydantic import SecretStr

from definitions.settings import Settings


def executor_settings(settings: Settings) -> Settings:
    """`settings` without the secrets executors never use (see the module's text)."""
    blank = SecretStr("")
    copy = settings.model_copy(
        update={
            "api": settings.api.model_copy(update={"token": blank, "admin_token": blank}),
            "airflow": settings.airflow.model_copy(update={"admin_password": blank, "database_url": blank}),
            "kafka": settings.kafka.model_copy(update={"sasl_password": blank}),
        }
    )
    copy._given = None  # what this process was given explicitly, secrets in plain text: only `persist` reads it
    return copy
