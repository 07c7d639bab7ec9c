"""What a Spark job's session is given in local mode and on the local standalone cluster."""

from __future__ import annotations

import sys
import zipfile

from definitions.settings import Settings
from definitions.spark import JOB_PACKAGES, batch_session_options, code_archive, master_url, on_cluster, session_conf


def settings_with(jars, tmp_path, **cluster) -> Settings:
    cluster.setdefault("workers", 0)
    base = Settings(jars_dir=jars, state_dir=tmp_path / "state")
    return base.model_copy(
        update={"spark": base.spark.model_copy(update={"cluster": base.spark.cluster.model_copy(update=cluster)})}
    )


def test_local_mode_is_the_default_and_takes_no_cluster_options(jars, tmp_path):
    settings = settings_with(jars, tmp_path)
    conf = session_conf(settings, "lambda-x")
    assert conf["spark.master"] == settings.spark.master == "local[*]" and not on_cluster(settings)
    assert "spark.cores.max" not in conf and "spark.executor.memory" not in conf
    assert conf["spark.pyspark.python"] == sys.executable
    assert conf["spark.driver.host"] == "127.0.0.1"


def test_with_workers_every_job_is_an_application_of_the_local_cluster(jars, tmp_path):
    settings = settings_with(jars, tmp_path, workers=2, port=7100, app_cores=3, executor_memory="1g")
    conf = session_conf(settings, "lambda-x")
    assert conf["spark.master"] == master_url(settings) == "spark://127.0.0.1:7100" and on_cluster(settings)
    assert (conf["spark.cores.max"], conf["spark.executor.memory"]) == ("3", "1g")
    assert conf["spark.driver.host"] == "127.0.0.1", "executors on this machine reach the driver on loopback"


def test_the_executors_python_is_a_setting(jars, tmp_path):
    settings = settings_with(jars, tmp_path)
    settings = settings.model_copy(
        update={"spark": settings.spark.model_copy(update={"python": "/opt/lambda/bin/python"})}
    )
    conf = session_conf(settings, "lambda-x")
    assert conf["spark.pyspark.python"] == "/opt/lambda/bin/python"
    assert conf["spark.pyspark.driver.python"] == sys.executable


def test_a_real_clusters_master_keeps_its_own_driver_address(jars, tmp_path):
    settings = settings_with(jars, tmp_path)
    settings = settings.model_copy(
        update={"spark": settings.spark.model_copy(update={"master": "spark://spark.example:7077"})}
    )
    conf = session_conf(settings, "lambda-x")
    assert conf["spark.master"] == "spark://spark.example:7077"
    assert "spark.driver.host" not in conf, "a remote cluster's executors cannot reach the driver on loopback"


def test_the_code_archive_holds_the_job_packages_and_is_named_by_its_content(jars, tmp_path):
    settings = settings_with(jars, tmp_path)
    first = code_archive(settings)
    assert code_archive(settings) == first, "the same code gives the same archive"
    names = zipfile.ZipFile(first).namelist()
    assert {name.split("/")[0] for name in names} == set(JOB_PACKAGES)
    assert "speed_layer/job.py" in names and "stores/realtime.py" in names and "definitions/spark.py" in names
    assert not any(name.startswith(("api/", "tests/", "infra/")) for name in names)
    first.write_bytes(b"")  # a power cut after the rename, before the data reached the disk
    assert code_archive(settings) == first and zipfile.ZipFile(first).namelist() == names, "written again"


def test_a_batch_run_has_its_own_driver_heap_and_collector(jars, tmp_path):
    """The streaming jobs' G1 options (heap handed back when idle) and the batch run's throughput
    collector cannot both be given to one JVM: the run's replace them, the time zone stays."""
    settings = settings_with(jars, tmp_path)
    streaming = session_conf(settings, "lambda-speed")
    batch = session_conf(settings, "lambda-batch", batch_session_options(settings))
    assert "-XX:+UseG1GC" in streaming["spark.driver.extraJavaOptions"]
    options = batch["spark.driver.extraJavaOptions"].split()
    assert options[-1] == "-Duser.timezone=UTC" and options[-2] == "-XX:+UseParallelGC"
    assert [o for o in options if o.startswith("-XX:+Use") and o.endswith("GC")] == ["-XX:+UseParallelGC"]
    assert batch["spark.driver.memory"] == settings.batch.driver_memory
    assert streaming["spark.driver.memory"] == settings.spark.driver_memory


def test_a_batch_run_keeps_the_users_other_driver_options(jars, tmp_path):
    settings = settings_with(jars, tmp_path)
    krb = "-Djava.security.krb5.conf=/etc/krb5.conf"
    own = settings.model_copy(
        update={
            "spark": settings.spark.model_copy(update={"jvm_options": f"-XX:+UseG1GC {krb} -XX:MaxHeapFreeRatio=30"})
        }
    )
    options = batch_session_options(own)["spark.driver.extraJavaOptions"].split()
    assert options == [krb, "-XX:MaxHeapFreeRatio=30", "-XX:+UseParallelGC", "-Duser.timezone=UTC"]
    conf = {"spark.driver.extraJavaOptions": f"-Duser.timezone=UTC -XX:+UseZGC {krb}"}
    in_conf = own.model_copy(update={"spark": own.spark.model_copy(update={"conf": conf})})
    options = batch_session_options(in_conf)["spark.driver.extraJavaOptions"].split()
    assert options == [krb, "-XX:+UseParallelGC", "-Duser.timezone=UTC"]


def test_jvm_options_of_spark_conf_keep_the_utc_time_zone(jars, tmp_path):
    """spark.conf's own extraJavaOptions replaced the platform's, and the UTC zone went with them:
    the archiver's date and hour partitions were written in the machine's zone."""
    from definitions.spark import trigger_interval

    settings = settings_with(jars, tmp_path)
    krb = "-Djava.security.krb5.conf=/etc/krb5.conf"
    conf = {"spark.driver.extraJavaOptions": krb, "spark.executor.extraJavaOptions": krb}
    own = settings.model_copy(update={"spark": settings.spark.model_copy(update={"conf": conf})})
    session = session_conf(own, "lambda-x")
    for key in conf:
        assert session[key].split() == [krb, "-Duser.timezone=UTC"], key
    assert batch_session_options(own)["spark.driver.extraJavaOptions"].split() == [
        krb,
        "-XX:+UseParallelGC",
        "-Duser.timezone=UTC",
    ]
    assert session["spark.sql.session.timeZone"] == "UTC"
    # Spark refused "1e-05 seconds" and more than nine decimals at the query's start
    assert [trigger_interval(s) for s in (0.001, 1.0, 0.1234567891, 3_600)] == [
        "1 milliseconds",
        "1000 milliseconds",
        "123 milliseconds",
        "3600000 milliseconds",
    ]
