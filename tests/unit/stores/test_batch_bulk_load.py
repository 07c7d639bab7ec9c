"""The bulk load's session options (no Spark, no service): the class path is built from the jars
that exist and names what is missing; a user's own class path from `spark.conf` is kept; puts
stay the default."""

from __future__ import annotations

import pytest

from definitions.settings import Settings
from stores import batch_bulk_load as bulk


def jars_dir(tmp_path, skip: str = "", own: bool = True):
    folder = tmp_path / "jars"
    (folder / "hbase").mkdir(parents=True)
    for artifact in bulk.HBASE_ARTIFACTS:
        if artifact != skip:
            (folder / "hbase" / f"{artifact}-2.6.1-hadoop3.jar").write_bytes(b"")
    (folder / "hbase" / "hbase-thrift-2.6.1.jar").write_bytes(b"")  # not needed: left out
    if own:
        (folder / bulk.LOAD_JAR).parent.mkdir()
        (folder / bulk.LOAD_JAR).write_bytes(b"")
    return folder


def test_the_class_path_holds_the_load_jar_and_one_jar_per_artifact(tmp_path):
    settings = Settings(jars_dir=jars_dir(tmp_path))
    path = bulk.class_path(settings)
    assert path[0] == str(settings.jars_dir / bulk.LOAD_JAR)
    assert len(path) == 1 + len(bulk.HBASE_ARTIFACTS)
    names = [p.rsplit("/", 1)[1] for p in path[1:]]
    assert "hbase-metrics-2.6.1-hadoop3.jar" in names and "hbase-metrics-api-2.6.1-hadoop3.jar" in names
    assert "hbase-thrift-2.6.1.jar" not in names


def test_a_missing_jar_is_named(tmp_path):
    settings = Settings(jars_dir=jars_dir(tmp_path, skip="hbase-metrics"))  # hbase-metrics-api is there
    with pytest.raises(bulk.BulkLoadUnavailable, match="no jar of hbase-metrics in .*make setup"):
        bulk.class_path(settings)


def test_a_missing_load_jar_is_named(tmp_path):
    settings = Settings(jars_dir=jars_dir(tmp_path, own=False))
    with pytest.raises(bulk.BulkLoadUnavailable, match="lambda-hbase-load.jar is missing"):
        bulk.class_path(settings)


def test_the_options_go_on_the_class_path_after_the_users_own(tmp_path):
    folder = jars_dir(tmp_path)
    plain = bulk.session_options(Settings(jars_dir=folder))
    assert set(plain) == {"spark.driver.extraClassPath", "spark.executor.extraClassPath"}
    assert "spark.jars" not in plain
    own = Settings(jars_dir=folder, spark={"conf": {"spark.driver.extraClassPath": "/opt/extra.jar"}})
    options = bulk.session_options(own)
    assert options["spark.driver.extraClassPath"] == "/opt/extra.jar:" + plain["spark.driver.extraClassPath"]
    assert options["spark.executor.extraClassPath"] == plain["spark.executor.extraClassPath"]


def test_the_default_loads_hfiles_only_where_hbase_and_spark_share_this_machine(monkeypatch):
    """auto: HFiles when HBase is a service of this machine's stack and Spark runs here (local mode
    or the local cluster); puts against a real cluster or an HBase elsewhere (containers), whose
    region servers cannot read the executors' files. An explicit choice is kept."""
    for name in ("LAMBDA_BATCH__LOAD", "LAMBDA_SPARK__MASTER", "LAMBDA_SPARK__CLUSTER__WORKERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("LAMBDA_STACK__MANAGED_SERVICES", raising=False)
    assert Settings().batch.load == "auto"
    assert bulk.chosen_load(Settings()) == "bulk"
    monkeypatch.setenv("LAMBDA_SPARK__CLUSTER__WORKERS", "2")
    assert bulk.chosen_load(Settings()) == "bulk"  # the local cluster: same disk
    monkeypatch.setenv("LAMBDA_SPARK__CLUSTER__WORKERS", "0")
    monkeypatch.setenv("LAMBDA_SPARK__MASTER", "spark://spark-master.internal:7077")
    assert bulk.chosen_load(Settings()) == "puts"
    monkeypatch.setenv("LAMBDA_BATCH__LOAD", "bulk")
    assert bulk.chosen_load(Settings()) == "bulk"  # the user says the directory is shared
    monkeypatch.delenv("LAMBDA_SPARK__MASTER")
    monkeypatch.delenv("LAMBDA_BATCH__LOAD")
    monkeypatch.setenv("LAMBDA_STACK__MANAGED_SERVICES", '["kafka"]')  # HBase elsewhere
    assert bulk.chosen_load(Settings()) == "puts"
    monkeypatch.setenv("LAMBDA_BATCH__LOAD", "puts")
    monkeypatch.delenv("LAMBDA_STACK__MANAGED_SERVICES")
    assert bulk.chosen_load(Settings()) == "puts"
    monkeypatch.setenv("LAMBDA_BATCH__LOAD", "hfiles")
    with pytest.raises(ValueError):
        Settings()


def test_a_session_is_accepted_exactly_when_started_with_the_bulk_loads_class_path(spark):
    """The shared session holds the classes when the tests run with batch.load = bulk (the test
    fixture starts it with session_options) and lacks them otherwise; check_session tells the two
    apart. tests/integration/batch/test_bulk_load.py refuses a plain session in its own process."""
    started_with = spark.sparkContext.getConf().get("spark.driver.extraClassPath", "")
    if bulk.LOAD_JAR.name in started_with:
        bulk.check_session(spark)
    else:
        with pytest.raises(bulk.BulkLoadUnavailable, match="has no lambdaplatform.stores.HBaseBulkLoad"):
            bulk.check_session(spark)


def test_a_killed_runs_hfile_folders_are_swept_and_live_ones_kept(tmp_path):
    """A folder whose load's process died (its lock file left, nobody holding it) goes; the folder
    of a load that runs (here, in a child process holding its lock) and folders without a lock
    file stay; a load's own folder goes when it ends."""
    import subprocess
    import sys
    import textwrap

    settings = Settings(state_dir=tmp_path)
    root = tmp_path / "run" / "bulk-load"
    holder = textwrap.dedent(
        f"""
        import sys
        from definitions.settings import Settings
        from stores import batch_bulk_load as bulk
        with bulk._load_folder(Settings(state_dir={str(tmp_path)!r}), "live_v3-minute-abc") as folder:
            (folder / "d").mkdir()
            print("ready", flush=True)
            sys.stdin.readline()
        """
    )
    live = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline().strip() == "ready"
        killed = subprocess.Popen(
            [sys.executable, "-c", holder.replace("live_v3", "killed_v2")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert killed.stdout.readline().strip() == "ready"
        killed.kill()
        killed.wait()
        (root / "foreign" / "d").mkdir(parents=True)
        removed = bulk.sweep_leftovers(settings)
        assert [p.name for p in removed] == ["killed_v2-minute-abc"]
        assert sorted(p.name for p in root.iterdir()) == ["foreign", "live_v3-minute-abc", "live_v3-minute-abc.lock"]
        assert bulk.sweep_leftovers(settings) == []
    finally:
        live.communicate("\n", timeout=30)
    assert sorted(p.name for p in root.iterdir()) == ["foreign"], "a load's folder and lock go when it ends"
    assert bulk.sweep_leftovers(Settings(state_dir=tmp_path / "nothing-here")) == []


def test_a_lock_file_a_sweep_removed_before_the_load_locked_it_is_made_again(tmp_path, monkeypatch):
    """A load opens `<folder>.lock`; before it locks it, another run's sweep takes the free lock and
    removes the file. The load then held a lock on a file no one can see: its folder had no lock
    file, and a kill -9 left its HFiles for good (the sweep leaves folders without one alone)."""
    import fcntl

    settings = Settings(state_dir=tmp_path)
    real_flock = fcntl.flock
    raced = []

    def flock_after_a_sweep(handle, flags):
        if not raced:  # the first lock the load takes: a sweep runs just before it
            raced.append(True)
            bulk.sweep_leftovers(settings)
        return real_flock(handle, flags)

    monkeypatch.setattr(bulk.fcntl, "flock", flock_after_a_sweep)
    with bulk._load_folder(settings, "page_views_v9-minute-x") as folder:
        lock_file = folder.with_name(folder.name + ".lock")
        assert raced and lock_file.exists(), "the load's lock file is there while it runs"
        monkeypatch.setattr(bulk.fcntl, "flock", real_flock)
        assert bulk.sweep_leftovers(settings) == [] and folder.is_dir(), "its lock is held: the folder stays"
    assert not folder.exists() and not lock_file.exists()
