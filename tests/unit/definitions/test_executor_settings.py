"""The functions Spark runs in executors' Python workers carry the settings pickled into every task
(and on a cluster across the network): they carried every secret of the platform, the API's
tokens and Airflow's admin password among them. Pickled as PySpark pickles them (cloudpickle)."""

from __future__ import annotations

from pydantic import SecretStr

from definitions.executor_settings import executor_settings
from definitions.settings import KafkaSettings
from definitions.view_loading import load_views


def with_secrets(settings):
    api = settings.api.model_copy(
        update={"token": SecretStr("producer-token-0123456789"), "admin_token": SecretStr("admin-token-9876543210")}
    )
    airflow = settings.airflow.model_copy(
        update={
            "admin_password": SecretStr("airflow-admin-pw-42"),
            "database_url": SecretStr("postgresql://u:db-pw-43@h/a"),
        }
    )
    kafka = KafkaSettings.model_validate({**settings.kafka.model_dump(), "sasl_password": "kafka-sasl-pw-44"})
    cassandra = settings.cassandra.model_copy(update={"password": SecretStr("cassandra-pw-45")})
    return settings.model_copy(update={"api": api, "airflow": airflow, "kafka": kafka, "cassandra": cassandra})


def pickled(function) -> bytes:
    from pyspark import cloudpickle

    return cloudpickle.dumps(function)


def test_the_writers_spark_runs_carry_no_secret_an_executor_does_not_use(settings):
    from speed_layer.job import partition_writer as realtime_writer
    from stores.batch_writer import partition_writer as batch_writer

    loaded = with_secrets(settings)
    view = next(iter(load_views(settings)))
    for function in (realtime_writer(loaded, {}, 0), batch_writer(loaded, "t", view, "minute")):
        data = pickled(function)
        for secret in ("producer-token", "admin-token", "airflow-admin-pw", "db-pw-43", "kafka-sasl-pw"):
            assert secret.encode() not in data, f"{secret} is pickled into every task"
    assert executor_settings(loaded).cassandra.password.get_secret_value() == "cassandra-pw-45"
