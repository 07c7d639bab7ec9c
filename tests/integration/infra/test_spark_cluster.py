"""Cluster mode (settings.spark.cluster.workers > 0, `make test-cluster`): every Spark job of the
platform runs as an application of the local standalone cluster, with executors on its workers, and
the speed layer's Cassandra writes come from those executors, not from its driver. In local mode
these tests are skipped; `make test` runs them in cluster mode after the local suite."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import httpx
import psutil
import pytest

from definitions.spark import local_cluster_secret
from infra.spark_services import SPARK_MASTER, SPARK_WORKERS
from stores.health import spark_cluster_state
from tests.support.cli import lambdactl

pytestmark = pytest.mark.usefixtures("stack")


@pytest.fixture(scope="module")
def cluster(settings):
    if settings.spark.cluster.workers == 0:
        pytest.skip("local mode: `make test-cluster` runs these with a Spark cluster")
    return settings.spark.cluster


def worker_executors(cluster) -> dict[str, list[dict]]:
    """{application id: executors} over every worker's own JSON endpoint."""
    out: dict[str, list[dict]] = {}
    for number in range(1, cluster.workers + 1):
        state = httpx.get(f"http://{cluster.host}:{cluster.ui_port + number}/json/", timeout=5).json()
        for executor in state.get("executors", []) + state.get("finishedexecutors", []):
            out.setdefault(executor["appid"], []).append(executor)
    return out


def test_the_streaming_jobs_run_as_cluster_applications_with_executors(settings, cluster):
    state = spark_cluster_state(settings)
    assert state["status"] == "ALIVE"
    assert len([w for w in state["workers"] if w["state"] == "ALIVE"]) == cluster.workers
    running = {app["name"]: app for app in state["activeapps"] if app["state"] == "RUNNING"}
    executors = worker_executors(cluster)
    for name in ("lambda-archiver", "lambda-speed-layer"):
        assert name in running, f"{name} is not an application of the cluster: {sorted(running)}"
        app = running[name]
        assert 0 < app["cores"] <= cluster.app_cores
        assert executors.get(app["id"]), f"{name} has no executor on the workers"


def test_a_batch_run_is_a_cluster_application_with_executors(settings, cluster):
    before = {app["id"] for app in spark_cluster_state(settings)["completedapps"]}
    done = lambdactl(settings, "batch", "--force", "--no-swap", "--no-report", "--json", "--views", "page_views")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["version"]
    finished = [app for app in spark_cluster_state(settings)["completedapps"] if app["id"] not in before]
    batch = [app for app in finished if app["name"] == "lambda-batch"]
    assert batch, f"no lambda-batch application finished on the cluster: {[a['name'] for a in finished]}"
    assert worker_executors(cluster).get(batch[0]["id"]), "the batch run had no executor on the workers"


def test_executors_run_the_platforms_code_from_the_shipped_archive(spark, cluster):
    """The executors import the job packages from the archive Spark distributed (addPyFile), not
    from this checkout (executors on another machine have no checkout)."""

    def where(_):
        import speed_layer.job
        import stores.realtime

        yield (stores.realtime.__file__, speed_layer.job.__file__)

    files = spark.sparkContext.parallelize(range(2), 2).mapPartitions(where).collect()
    assert files and all(".zip" in f and "lambda-jobs-" in f for pair in files for f in pair), files


def _command_line(process: psutil.Process) -> str:
    """Its command line; empty for a process that ended meanwhile (an executor of a finished
    application can be a zombie for a moment)."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def _cassandra_peers(processes, port: int) -> int:
    count = 0
    for proc in processes:
        try:
            count += sum(
                1 for c in proc.net_connections("tcp") if c.raddr and c.raddr.port == port and c.status == "ESTABLISHED"
            )
        except psutil.NoSuchProcess:
            continue
    return count


def test_the_speed_layer_writes_from_executors_not_from_its_driver(settings, cluster, stack):
    """The speed layer's driver (its Python process and the JVM it starts) holds no connection to
    Cassandra; the executors' Python workers, under the cluster's workers, do."""
    port = settings.cassandra.port
    driver = stack.supervisor.process("speed-layer")
    assert driver is not None, "the speed layer is not running"
    driver_tree = [driver, *driver.children(recursive=True)]
    workers: list = [stack.supervisor.process(w.name) for w in SPARK_WORKERS[: cluster.workers]]
    assert all(workers), "a worker of the cluster is not running"
    worker_trees = [p for w in workers for p in [w, *w.children(recursive=True)]]
    python_workers = [p for p in worker_trees if "pyspark.daemon" in _command_line(p)]
    assert python_workers, "no executor runs a Python worker (has the speed layer written a batch yet?)"
    assert _cassandra_peers(python_workers, port) > 0, "the executors' Python workers hold no Cassandra connection"
    assert _cassandra_peers(driver_tree, port) == 0, "the speed layer's driver holds a Cassandra connection"


# A plain PySpark application that knows the master's address but not the cluster's secret.
_APP_WITHOUT_SECRET = """
import sys
from pyspark.sql import SparkSession
master, name, host, memory = sys.argv[1:]
spark = (SparkSession.builder.master(master).appName(name)
         .config("spark.driver.host", host).config("spark.driver.bindAddress", host)
         .config("spark.cores.max", "1").config("spark.executor.memory", memory).getOrCreate())
print("RAN", spark.sparkContext.parallelize(range(4), 2).sum(), flush=True)
"""
# What the driver logs when the master refuses it: the first refusal comes within seconds (the
# master asks for the SASL handshake), giving up after three 20 s registration attempts.
_REFUSED = re.compile(r"Expected SaslMessage|All masters are unresponsive")


def test_an_application_without_the_clusters_secret_is_refused(settings, cluster, tmp_path, unique):
    name = f"lambda-no-secret-{unique}"
    log = tmp_path / "driver.log"
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR")}
    args = [cluster.master_url, name, cluster.host, cluster.executor_memory]
    with log.open("w") as out:
        driver = subprocess.Popen(
            [sys.executable, "-c", _APP_WITHOUT_SECRET, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its JVM too: stopped together below
        )
    try:
        deadline = time.monotonic() + 90
        while driver.poll() is None and time.monotonic() < deadline and not _REFUSED.search(log.read_text()):
            time.sleep(0.5)
        text = log.read_text()
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    assert "RAN" not in text, "an application without the secret ran a job on the cluster"
    assert _REFUSED.search(text), f"no refusal within 90 s: {text[-3000:]}"
    state = spark_cluster_state(settings)
    assert name not in {app["name"] for app in state["activeapps"] + state["completedapps"]}


def test_the_platforms_sessions_hold_the_secret_and_no_command_line_shows_it(spark, settings, cluster, stack):
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.authenticate") == "true"
    assert conf.get("spark.authenticate.secret") == local_cluster_secret(settings)
    assert spark.sparkContext.parallelize(range(4), 2).sum() == 6, "the platform's own session runs jobs"
    secret = local_cluster_secret(settings)
    daemons = [stack.supervisor.process(d.name) for d in (SPARK_MASTER, *SPARK_WORKERS[: cluster.workers])]
    assert all(daemons), "a process of the cluster is not running"
    processes = [psutil.Process(), *psutil.Process().children(recursive=True)]
    processes += [p for d in daemons for p in [d, *d.children(recursive=True)]]
    for process in processes:
        assert secret not in _command_line(process), f"the secret is on the command line of {process.pid}"
