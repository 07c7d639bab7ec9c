"""The local Spark cluster's shared secret (`spark.authenticate`): generated once, private, given to
the master and workers in a private properties file and to every application of that cluster in
its session options, never on a command line or in an environment."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest

from definitions.settings import Settings
from definitions.spark import LOCAL_CLUSTER_SECRET, local_cluster_secret, session_conf
from infra.java import JavaRuntime
from infra.spark_services import PROPERTIES_FILE, SPARK_MASTER, SPARK_WORKERS

JAVA = JavaRuntime(Path("/usr/lib/jvm/java-17/bin/java"), 17)


def settings_with(jars, tmp_path, master: str = "local[*]", conf: dict[str, str] | None = None, **cluster) -> Settings:
    base = Settings(jars_dir=jars, state_dir=tmp_path / "state")
    spark = base.spark.model_copy(
        update={"master": master, "conf": conf or {}, "cluster": base.spark.cluster.model_copy(update=cluster)}
    )
    return base.model_copy(update={"spark": spark})


def read_properties(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))


def private(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_secret_is_generated_once_private_in_the_masters_configuration(jars, tmp_path):
    settings = settings_with(jars, tmp_path, workers=1)
    secret = local_cluster_secret(settings)
    path = settings.state_dir / LOCAL_CLUSTER_SECRET
    assert path.parent == SPARK_MASTER.dirs(settings).conf
    assert len(secret) >= 32 and path.read_text().strip() == secret and private(path)
    assert local_cluster_secret(settings) == secret, "the same secret on every call"
    assert [p.name for p in path.parent.iterdir()] == [path.name], "no temporary file is left behind"
    assert secret not in settings.model_dump_json(), "the secret is not a setting"


def test_concurrent_first_calls_agree_on_one_secret(jars, tmp_path):
    settings = settings_with(jars, tmp_path, workers=1)
    found: list[str] = []
    threads = [threading.Thread(target=lambda: found.append(local_cluster_secret(settings))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == 8 and len(set(found)) == 1


@pytest.mark.parametrize("daemon", [SPARK_MASTER, SPARK_WORKERS[0]], ids=lambda d: d.name)
def test_the_daemons_take_the_secret_from_a_private_properties_file(jars, tmp_path, daemon):
    settings = settings_with(jars, tmp_path, workers=1)
    dirs = daemon.dirs(settings)
    daemon.render(settings, dirs, JAVA)
    properties_file = dirs.conf / PROPERTIES_FILE
    assert private(properties_file)
    properties = read_properties(properties_file)
    assert properties["spark.authenticate"] == "true"
    assert properties["spark.authenticate.secret"] == local_cluster_secret(settings)
    if daemon is SPARK_MASTER:
        assert properties["spark.ui.killEnabled"] == "false"
        assert properties["spark.master.rest.enabled"] == "false", "the REST server takes drivers without the secret"
    else:
        assert properties["spark.worker.cleanup.enabled"] == "true"
        assert properties["spark.worker.cleanup.appDataTtl"] == "86400"

    command = daemon.command(settings, JAVA)
    assert command[command.index("--properties-file") + 1] == str(properties_file)
    # `env K=V … spark-class …`: both the environment and the arguments are readable in `ps`.
    assert not any(local_cluster_secret(settings) in part for part in command)
    assert not any("spark.authenticate" in part for part in command)
    environment = dict(part.split("=", 1) for part in command[1 : command.index(daemon.main_class) - 1])
    assert environment["SPARK_MASTER_OPTS"] == environment["SPARK_WORKER_OPTS"] == "", "no -D option from the shell"


def test_local_mode_sessions_carry_no_secret(jars, tmp_path):
    settings = settings_with(jars, tmp_path, workers=0)
    conf = session_conf(settings, "lambda-x")
    assert not any(key.startswith("spark.authenticate") for key in conf)
    assert not (settings.state_dir / LOCAL_CLUSTER_SECRET).exists(), "local mode generates no secret"


def test_applications_of_the_local_cluster_carry_its_secret(jars, tmp_path):
    settings = settings_with(jars, tmp_path, workers=2)
    conf = session_conf(settings, "lambda-x")
    assert conf["spark.authenticate"] == "true"
    assert conf["spark.authenticate.secret"] == local_cluster_secret(settings)
    SPARK_MASTER.render(settings, SPARK_MASTER.dirs(settings), JAVA)
    master_properties = read_properties(SPARK_MASTER.dirs(settings).conf / PROPERTIES_FILE)
    assert conf["spark.authenticate.secret"] == master_properties["spark.authenticate.secret"]


def test_a_real_cluster_is_configured_through_spark_conf(jars, tmp_path):
    settings = settings_with(jars, tmp_path, master="spark://spark.example:7077", workers=0)
    assert not any(key.startswith("spark.authenticate") for key in session_conf(settings, "lambda-x"))
    assert not (settings.state_dir / LOCAL_CLUSTER_SECRET).exists()
    own = {"spark.authenticate": "true", "spark.authenticate.secret": "theirs"}
    settings = settings_with(jars, tmp_path, master="spark://spark.example:7077", conf=own, workers=0)
    conf = session_conf(settings, "lambda-x")
    assert (conf["spark.authenticate"], conf["spark.authenticate.secret"]) == ("true", "theirs")


def test_the_drivers_jvm_is_launched_without_the_secret_on_its_command_line(jars, tmp_path, monkeypatch):
    """PySpark puts every option it launches the driver's JVM with on that JVM's command line."""
    import pyspark.core.context as context

    from definitions import spark

    launched: list[dict[str, str]] = []

    def launch_gateway(conf=None, popen_kwargs=None):
        launched.append(dict(conf.getAll()))
        raise RuntimeError("not launched in a unit test")

    monkeypatch.setattr(context, "launch_gateway", launch_gateway)
    monkeypatch.setattr(context.SparkContext, "_gateway", None)
    monkeypatch.setattr(context.SparkContext, "_jvm", None)
    settings = settings_with(jars, tmp_path, workers=1, conf={"spark.hadoop.fs.s3a.secret.key": "s3"})
    conf = session_conf(settings, "lambda-x")
    with pytest.raises(RuntimeError, match="not launched"):
        spark._launch_driver_jvm(conf)
    assert launched, "the JVM is launched with the session's options"
    options = launched[0]
    assert options["spark.master"] == conf["spark.master"] and options["spark.authenticate"] == "true"
    assert options["spark.driver.memory"] == conf["spark.driver.memory"], "launch-time options are kept"
    assert "spark.authenticate.secret" not in options and "spark.hadoop.fs.s3a.secret.key" not in options
    assert local_cluster_secret(settings) not in repr(options)
