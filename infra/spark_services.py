"""The local Spark standalone cluster (settings.spark.cluster): a master and `workers` workers,
run from the pinned pyspark's own launcher (`bin/spark-class`) as processes of the stack. With
workers, every Spark job of the platform runs as an application of this cluster
(definitions/spark.py), its tasks in executors the workers start. Master, workers and applications
share a secret (`spark.authenticate`): a process without it is refused."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from definitions.files import write_private
from definitions.settings import Settings
from definitions.spark import local_cluster_secret
from infra.errors import StackError
from infra.java import JavaRuntime
from infra.service_base import Service, ServiceDirs
from stores import health

MAX_WORKERS = 4


def pyspark_home() -> Path:
    """The pyspark distribution: its `bin/spark-class` launcher and `jars/`."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise StackError("spark", "pyspark is not installed: run `make setup`")
    return Path(next(iter(spec.submodule_search_locations)))


PROPERTIES_FILE = "spark.properties"

# The options of the master and of every worker besides those of their command lines.
_DAEMON_PROPERTIES = {
    # The master's UI cannot kill applications, and it has no REST submission server (on by default
    # on port 6066): that one takes drivers from anyone, without `spark.authenticate`.
    "master": {"spark.ui.killEnabled": "false", "spark.master.rest.enabled": "false"},
    # A worker deletes the work directories (jars, logs) of finished applications after a day.
    "worker": {
        "spark.worker.cleanup.enabled": "true",
        "spark.worker.cleanup.interval": "3600",
        "spark.worker.cleanup.appDataTtl": "86400",
    },
}


def daemon_properties(settings: Settings, worker: int) -> dict[str, str]:
    """The properties file of the master (`worker` 0) or of a worker: its options, and the cluster's
    shared secret (`spark.authenticate`): master, workers and applications (definitions/spark.py)
    all hold it, so a process of another local user without it can neither register a worker nor
    submit an application."""
    return {
        **_DAEMON_PROPERTIES["worker" if worker else "master"],
        "spark.authenticate": "true",
        "spark.authenticate.secret": local_cluster_secret(settings),
    }


def _renderer(worker: int):
    def render(settings: Settings, dirs: ServiceDirs, java: JavaRuntime) -> None:
        (dirs.data / "work").mkdir(parents=True, exist_ok=True)
        # Private: it holds the secret, given to the daemon as a file, never on its command line
        # or in its environment.
        text = "".join(f"{key}={value}\n" for key, value in daemon_properties(settings, worker).items())
        write_private(dirs.conf / PROPERTIES_FILE, text)

    return render


@dataclass(frozen=True)
class SparkDaemon(Service):
    """The master (`worker` 0) or worker number `worker` of the local cluster."""

    worker: int = 0

    def command(self, settings: Settings, java: JavaRuntime) -> list[str]:
        c = settings.spark.cluster
        home = pyspark_home()
        dirs = self.dirs(settings)
        if self.worker == 0:
            args = ["--host", c.host, "--port", str(c.port), "--webui-port", str(c.ui_port)]
        else:
            args = [
                c.master_url,
                "--host",
                c.host,
                "--cores",
                str(c.worker_cores),
                "--memory",
                f"{c.worker_memory_mb}m",
                "--webui-port",
                str(c.ui_port + self.worker),
                "--work-dir",
                str(dirs.data / "work"),
            ]
        # The options and the shared secret (written by `render`).
        args += ["--properties-file", str(dirs.conf / PROPERTIES_FILE)]
        environment = {
            "SPARK_HOME": str(home),
            "JAVA_HOME": str(java.home),
            "SPARK_DAEMON_MEMORY": f"{c.daemon_heap_mb}m",
            # Every port, web UIs included, on the cluster's host only (Spark binds its UIs to
            # 0.0.0.0 unless told).
            "SPARK_LOCAL_IP": c.host,
            # Their options come from the properties file only: none from the shell that ran `up`
            # (a -D option there would win over the file, `spark.authenticate` included).
            "SPARK_MASTER_OPTS": "",
            "SPARK_WORKER_OPTS": "",
            "SPARK_DAEMON_JAVA_OPTS": "",
        }
        return [
            "env",
            *(f"{k}={v}" for k, v in environment.items()),
            str(home / "bin" / "spark-class"),
            self.main_class,
            *args,
        ]

    def check_jars(self, settings: Settings) -> None:
        launcher = pyspark_home() / "bin" / "spark-class"
        if not os.access(launcher, os.X_OK):
            raise StackError(self.name, f"{launcher} is missing or not executable: run `make setup`")


def _ports(worker: int):
    def ports(settings: Settings) -> dict[str, int]:
        c = settings.spark.cluster
        return {"ui": c.ui_port + worker} if worker else {"master": c.port, "ui": c.ui_port}

    return ports


def _daemon(name: str, main_class: str, worker: int) -> SparkDaemon:
    return SparkDaemon(
        name=name,
        jar_group="",
        main_class=main_class,
        heap_mb=lambda s: s.spark.cluster.daemon_heap_mb,
        ports=_ports(worker),
        host=lambda s: s.spark.cluster.host,
        render=_renderer(worker),
        args=lambda d: [],
        jvm_flags=lambda s, d: [],
        check=health.spark_worker(worker) if worker else health.spark_master,
        timeout_s=lambda s: s.spark.cluster.health_timeout_s,
        worker=worker,
    )


SPARK_MASTER = _daemon("spark-master", "org.apache.spark.deploy.master.Master", 0)
SPARK_WORKERS = tuple(
    _daemon(f"spark-worker-{n}", "org.apache.spark.deploy.worker.Worker", n) for n in range(1, MAX_WORKERS + 1)
)


def cluster_services(settings: Settings) -> list[str]:
    """The names of the cluster's processes the settings ask for (none in local mode)."""
    workers = settings.spark.cluster.workers
    return [SPARK_MASTER.name, *(w.name for w in SPARK_WORKERS[:workers])] if workers else []
