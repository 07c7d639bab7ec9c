"""The services of the local stack, in start order: the stores (infra/store_services.py, each a
JVM with its configuration rendered from infra/templates) and the platform's own processes (the
archiver, the speed layer, the API, and Airflow's API server, scheduler and DAG processor),
all run by the supervisor. Also re-exports what the stack
manager and the tests use of infra/service_base.py and infra/store_services.py.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from definitions.settings import Settings
from infra.errors import StackError
from infra.java import JavaRuntime
from infra.service_base import JAVA_DIR, TEMPLATES, Service, ServiceDirs, render_template  # noqa: F401
from infra.spark_services import SPARK_MASTER, SPARK_WORKERS
from infra.store_services import CASSANDRA, DATANODE, HBASE, HBASE_THRIFT, KAFKA, NAMENODE, commitlog_sync_yaml  # noqa: F401
from stores import health

# --- The platform's own processes ----------------------------------------------------------------


@dataclass(frozen=True)
class PlatformProcess:
    """A process of the platform itself (a Spark job, the API), run with the virtualenv's Python."""

    name: str
    module: str
    check: Callable[[Settings], str]
    timeout_s: Callable[[Settings], float]
    ports: Callable[[Settings], dict[str, int]] = lambda s: {}
    host: Callable[[Settings], str] = lambda s: "127.0.0.1"
    needs_spark: bool = True
    phase: int = 1
    args: tuple[str, ...] = ()
    # Who the stop signal reaches (infra/session_leader.py --stops): a PySpark driver stops its
    # queries through its JVM, so the JVM (in its group) must not get the signal too.
    stops: str = "group"
    # The persisted settings (top-level keys) whose change `up` restarts it for; empty: all but
    # `views`, which `lambdactl views apply` applies itself (definitions.settings_store.persisted_digest).
    reads: tuple[str, ...] = ()
    # Without `reads`: the persisted sections it never reads, whose change does not restart it.
    ignores: tuple[str, ...] = ()

    def dirs(self, settings: Settings) -> ServiceDirs:
        return ServiceDirs(settings.state_dir / self.name)

    def render(self, settings: Settings, dirs: ServiceDirs, java: JavaRuntime) -> None:
        dirs.root.mkdir(parents=True, exist_ok=True)

    def command(self, settings: Settings, java: JavaRuntime) -> list[str]:
        return [sys.executable, "-m", self.module, *self.args]

    def check_jars(self, settings: Settings) -> None:
        if self.needs_spark:
            folder = settings.jars_dir / "spark-kafka"
            if not any(folder.glob("*.jar")):
                raise StackError(self.name, f"no Spark Kafka connector jars in {folder}: run `make setup`")


# What the streaming jobs never read: the API's and Airflow's sections. A change to them (a token, a
# read limit, the API's port) restarts those, not the archiver and the speed layer, whose restart
# pauses ingestion and freshness.
STREAMING_IGNORES = ("api", "airflow")

ARCHIVER = PlatformProcess(
    name="archiver",
    module="ingest.archiver",
    check=health.archiver,
    timeout_s=lambda s: s.archiver.health_timeout_s,
    stops="program",
    ignores=STREAMING_IGNORES,
)

SPEED_LAYER = PlatformProcess(
    name="speed-layer",
    module="speed_layer.job",
    check=health.speed_layer,
    timeout_s=lambda s: s.speed.health_timeout_s,
    stops="program",
    ignores=STREAMING_IGNORES,
)

API = PlatformProcess(
    name="api",
    module="api.server",
    check=health.api,
    timeout_s=lambda s: s.api.health_timeout_s,
    ports=lambda s: {"http": s.api.port},
    host=lambda s: s.api.host,
    needs_spark=False,
)

# What Airflow's processes are started with (infra/airflow.py: its configuration, and the values its
# tasks' commands are given); everything else its tasks read from the persisted file at each run. A
# restart of its scheduler ends a batch task in progress: not for a change it does not read.
AIRFLOW_READS = (
    "airflow",
    "batch.interval_s",
    "batch.task_timeout_s",
    "batch.completeness_wait_s",
    "api.host",
    "api.port",
    "api.public_url",
    "ingest_bucket_s",
    "environment",
    "state_dir",
    "logging",
)

AIRFLOW = PlatformProcess(
    name="airflow",  # Airflow's API server (and UI); it also brings Airflow's database schema up to date
    module="infra.airflow",
    args=("api-server",),
    check=health.airflow,
    timeout_s=lambda s: s.airflow.health_timeout_s,
    ports=lambda s: {"api": s.airflow.port},
    host=lambda s: s.airflow.host,
    needs_spark=False,
    reads=AIRFLOW_READS,
)


def _airflow_component(component: str) -> PlatformProcess:
    """Airflow's scheduler or DAG processor: a program of its own, restarted on its own. (No
    triggerer: no task of the platform's DAG defers.)"""
    return PlatformProcess(
        name=f"airflow-{component}",
        module="infra.airflow",
        args=(component,),
        check=health.airflow_component(component),
        timeout_s=lambda s: s.airflow.health_timeout_s,
        needs_spark=False,
        reads=AIRFLOW_READS,
    )


AIRFLOW_SCHEDULER = _airflow_component("scheduler")
AIRFLOW_DAG_PROCESSOR = _airflow_component("dag-processor")

ALL: tuple[Service | PlatformProcess, ...] = (
    KAFKA,
    NAMENODE,
    DATANODE,
    HBASE,
    HBASE_THRIFT,
    CASSANDRA,
    SPARK_MASTER,
    *SPARK_WORKERS,
    ARCHIVER,
    SPEED_LAYER,
    API,
    AIRFLOW,
    AIRFLOW_SCHEDULER,
    AIRFLOW_DAG_PROCESSOR,
)
BY_NAME = {s.name: s for s in ALL}
