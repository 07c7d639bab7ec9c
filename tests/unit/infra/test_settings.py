"""The one settings object: defaults on loopback, env vars and a TOML file, typos refused."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pydantic
import pytest

from definitions.settings import Settings, SettingsFileError


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    import os

    for key in list(os.environ):
        if key.startswith("LAMBDA_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def test_local_defaults_bind_to_loopback():
    s = Settings()
    assert s.kafka.bootstrap == "127.0.0.1:9092"
    assert s.hdfs.url == "hdfs://127.0.0.1:9000"
    assert s.hbase.host == "127.0.0.1" and s.hbase.thrift_port == 9090
    assert s.cassandra.hosts == ["127.0.0.1"] and s.cassandra.port == 9042
    assert s.spark.master == "local[*]"
    assert s.state_dir.is_absolute()


def test_env_overrides_nested_values(monkeypatch):
    monkeypatch.setenv("LAMBDA_KAFKA__PORT", "19092")
    monkeypatch.setenv("LAMBDA_CASSANDRA__HOSTS", '["10.1.2.3", "10.1.2.4"]')
    monkeypatch.setenv("LAMBDA_SPARK__MASTER", "spark://spark-master:7077")
    s = Settings()
    assert s.kafka.bootstrap == "127.0.0.1:19092"
    assert s.cassandra.hosts == ["10.1.2.3", "10.1.2.4"]
    assert s.spark.master == "spark://spark-master:7077"


def test_toml_file_is_read_and_env_wins(monkeypatch, tmp_path):
    config = tmp_path / "platform.toml"
    config.write_text(
        'ingest_bucket_s = 60\n[hdfs]\nhost = "namenode.example"\nport = 8020\n[kafka]\npartitions = 12\n'
    )
    monkeypatch.setenv("LAMBDA_CONFIG", str(config))
    monkeypatch.setenv("LAMBDA_KAFKA__PARTITIONS", "6")
    s = Settings()
    assert s.ingest_bucket_s == 60
    assert s.hdfs.url == "hdfs://namenode.example:8020"
    assert s.kafka.partitions == 6


@pytest.mark.parametrize(
    "text, named",
    [
        ('[api]\ntoken = "a-bearer-token-of-the-platform"\n', "api.token"),
        ('[kafka]\nsasl_username = "ops"\nsasl_password = "kafka-secret"\n', "kafka.sasl_password"),
        ('[airflow]\ndatabase_url = "postgresql://u:pw@db/airflow"\n', "airflow.database_url"),
        ('[spark.conf]\n"spark.authenticate.secret" = "s3cret"\n', "spark.conf.spark.authenticate.secret"),
        ('[spark.conf]\n"spark.hadoop.fs.s3a.access.key" = "AKIA"\n', "spark.conf.spark.hadoop.fs.s3a.access.key"),
    ],
)
def test_a_settings_file_every_user_can_read_is_refused_when_it_holds_a_secret(monkeypatch, open_folder, text, named):
    """The token, passwords and database URL were read from a file any local user could read."""
    config = open_folder / "platform.toml"
    config.write_text(text)
    monkeypatch.setenv("LAMBDA_CONFIG", str(config))
    config.chmod(0o644)
    with pytest.raises(SettingsFileError, match=rf"{re.escape(named)}.*chmod o-r"):
        Settings()
    config.chmod(0o640)  # its group's to read (as it is the group's to change: definitions.files)
    Settings()
    config.chmod(0o644)
    open_folder.chmod(0o700)  # in a folder only its owner enters: no other user reads it
    try:
        Settings()
    finally:
        open_folder.chmod(0o755)
    config.write_text("[kafka]\npartitions = 12\n")  # no secret: every user may read it
    config.chmod(0o644)
    assert Settings().kafka.partitions == 12


@pytest.fixture
def open_folder():
    """A folder every user can enter (pytest's own are its owner's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="lambda-settings-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def test_lambda_toml_in_working_directory_is_picked_up(tmp_path):
    (tmp_path / "lambda.toml").write_text("[kafka]\nport = 29092\n")
    assert Settings().kafka.port == 29092


def test_unknown_keys_are_refused(monkeypatch, tmp_path):
    config = tmp_path / "typo.toml"
    config.write_text("[kafka]\nprot = 9093\n")
    monkeypatch.setenv("LAMBDA_CONFIG", str(config))
    with pytest.raises(pydantic.ValidationError, match="prot"):
        Settings()


def test_missing_config_file_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("LAMBDA_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(SettingsFileError, match="nope.toml"):
        Settings()


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"[kafka]\nport = 90 92\n", "line 2"),
        (b'[kafka]\nhost = "\xff\xfe"\n', "codec"),
        (b"a = " + b"[" * 100_000 + b"]" * 100_000, "recursion"),
    ],
    ids=["not TOML", "not UTF-8", "nested deep"],
)
def test_a_settings_file_that_is_not_toml_is_an_error_naming_the_file(monkeypatch, tmp_path, content, problem):
    config = tmp_path / "broken.toml"
    config.write_bytes(content)
    monkeypatch.setenv("LAMBDA_CONFIG", str(config))
    with pytest.raises(SettingsFileError, match=f"the settings file {config} is not readable TOML: .*{problem}"):
        Settings()


def test_a_persisted_settings_file_nested_too_deep_is_an_error_naming_the_file(tmp_path):
    from definitions.settings_store import SettingsConflict, read_persisted

    persisted = tmp_path / "settings.json"
    persisted.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SettingsConflict, match=f"{persisted} are not readable JSON"):
        read_persisted(persisted)


@pytest.mark.parametrize(
    "section, values, name",
    [
        ("api", {"port": 70_000}, "port"),
        ("kafka", {"port": -5}, "port"),
        ("kafka", {"bootstrap_servers": ["broker:²"]}, "bootstrap_servers"),
        ("hbase", {"thrift_hosts": ["h:²"]}, "thrift_hosts"),
        ("hbase", {"thrift_hosts": ["h:99999"]}, "thrift_hosts"),
        ("api", {"max_query_ahead_s": 10**12}, "max_query_ahead_s"),
        ("api", {"earliest_query_time_s": 10**13}, "earliest_query_time_s"),
        ("spark", {"cluster": {"ui_port": 65_535, "workers": 1}}, "ui_port"),
    ],
)
def test_a_port_or_time_no_one_can_use_is_refused_naming_the_setting(section, values, name):
    with pytest.raises(pydantic.ValidationError, match=name):
        Settings(_env_file=None, **{section: values})


def test_a_list_written_when_the_stack_ran_a_triggerer_starts_without_it():
    written = ["kafka", "airflow", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"]
    assert Settings(_env_file=None, stack={"managed_services": written}).stack.managed_services == written[:-1]


def test_managing_airflow_manages_all_three_of_its_programs():
    from definitions.settings import AIRFLOW_COMPANIONS

    older = Settings(_env_file=None, stack={"managed_services": ["kafka", "airflow"]})
    assert older.stack.managed_services == ["kafka", "airflow", *AIRFLOW_COMPANIONS]
    assert not set(AIRFLOW_COMPANIONS) & set(
        Settings(_env_file=None, stack={"managed_services": ["api"]}).stack.managed_services
    )


@pytest.mark.parametrize(
    ("bucket_s", "explicit", "expected"), [(3_600, None, 60.0), (60, None, 10.0), (12, None, 5.0), (60, 2.0, 2.0)]
)
def test_ticks_follow_the_ingest_bucket_unless_set(bucket_s, explicit, expected):
    archiver = {} if explicit is None else {"tick_interval_s": explicit}
    assert Settings(ingest_bucket_s=bucket_s, archiver=archiver).tick_interval_s == expected


@pytest.mark.parametrize(
    "values, name",
    [
        ({"stop_timeout_s": -1}, "stop_timeout_s"),
        ({"stop_timeout_s": 0}, "stop_timeout_s"),
        ({"stop_timeout_s": float("nan")}, "stop_timeout_s"),
        ({"stop_timeout_s": float("inf")}, "stop_timeout_s"),
        ({"stop_timeout_s": 1e9}, "stop_timeout_s"),
        ({"restart_window_s": float("inf")}, "restart_window_s"),
        ({"restart_backoff_s": float("nan")}, "restart_backoff_s"),
        ({"restart_max": 10**6}, "restart_max"),
    ],
)
def test_a_stop_or_restart_setting_no_process_can_follow_is_refused(values, name):
    """A negative, NaN or infinite stop timeout made `down` fail half-way after its SIGTERMs; 0
    SIGKILLed every store at once; an endless one hung `down`."""
    with pytest.raises(pydantic.ValidationError, match=name):
        Settings(_env_file=None, stack=values)


@pytest.mark.parametrize("token", ["My secret pass!", "short-secret", "ünïcödé-secret-value-1"])
def test_a_refused_secret_is_not_repeated_in_the_error(token, monkeypatch):
    """The error is printed by every process that loads the settings, into logs and the restart
    record: it names the setting and never carries the value."""
    monkeypatch.setenv("LAMBDA_API__TOKEN", token)
    with pytest.raises(pydantic.ValidationError) as refused:
        Settings()
    assert "api.token" in str(refused.value)
    assert token not in str(refused.value)
    monkeypatch.delenv("LAMBDA_API__TOKEN")
    monkeypatch.setenv("LAMBDA_AIRFLOW__ADMIN_PASSWORD", "")
    monkeypatch.setenv("LAMBDA_KAFKA__PORT", "secret-looking-port-value")
    with pytest.raises(pydantic.ValidationError) as refused:
        Settings()
    assert "secret-looking-port-value" not in str(refused.value)


@pytest.mark.parametrize(
    "section, values",
    [
        ("kafka", {"host": "127.0.0.1\nauto.create.topics.enable=true"}),
        ("hdfs", {"host": "namenode</value></property><property>"}),
        ("cassandra", {"hosts": ["10.0.0.1", "db; rm -rf /"]}),
        ("api", {"host": "0.0.0.0 "}),
        ("hbase", {"host": ""}),
    ],
)
def test_a_host_that_is_no_host_is_refused_naming_the_setting(section, values):
    """Hosts are written into the stores' configuration files and URLs: a line break added
    arbitrary properties to Kafka's server.properties."""
    with pytest.raises(pydantic.ValidationError, match="host"):
        Settings(_env_file=None, **{section: values})
    assert Settings(_env_file=None, kafka={"host": "kafka-1.example.org"}, cassandra={"hosts": ["::1", "[fe80::1]"]})


def test_a_retention_grace_under_which_no_run_could_swap_is_refused():
    """A verified run swaps only while a minute of its grace is left: with a grace of 30 s, every
    run wrote and verified its tables, was refused its swap, and left them behind."""
    from definitions.layer_settings import BatchSettings

    with pytest.raises(pydantic.ValidationError, match="retention_grace_s"):
        BatchSettings(retention_grace_s=30)
    assert BatchSettings(retention_grace_s=600).retention_grace_s == 600


@pytest.mark.parametrize("path", ["/srv/run #2/state", "/srv/a,b/state", "/srv/c:d/state"])
def test_a_state_directory_the_stores_configurations_would_split_is_refused(path, tmp_path):
    """Cassandra's YAML read `/srv/run #2/...` as `/srv/run` for all five of its directories."""
    with pytest.raises(pydantic.ValidationError, match="state_dir"):
        Settings(state_dir=path)
    assert Settings(state_dir=tmp_path / "with space").state_dir.name == "with space"


@pytest.mark.parametrize("variable", ["LAMBDA_STATE_DIR", "LAMBDA_JARS_DIR"])
@pytest.mark.parametrize("value", ["", "   ", "~/lambda", "~operator/lambda"])
def test_an_empty_directory_or_one_a_shell_would_have_expanded_is_refused(variable, value, monkeypatch, tmp_path):
    """`LAMBDA_STATE_DIR= lambdactl up` put the whole stack's state in the current folder, where a
    `down` from another folder did not find it; `~/x` became a folder named `~` there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(variable, value)
    with pytest.raises(pydantic.ValidationError, match=variable.removeprefix("LAMBDA_").lower()) as refused:
        Settings()
    assert ("empty" if not value.strip() else "'~'") in str(refused.value)


@pytest.mark.parametrize("which", ["file", "folder"])
def test_a_lambda_toml_others_can_change_is_not_read(tmp_path, which, monkeypatch):
    """It names the Java and the view modules every process runs, and `up` persists what it says:
    one every user can change (a world-writable folder the operator runs commands in) is refused."""
    import stat

    config = tmp_path / "lambda.toml"
    config.write_text('[stack]\njava_home = "/tmp/elsewhere"\n')
    target = config if which == "file" else tmp_path
    target.chmod(target.stat().st_mode | stat.S_IWOTH)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SettingsFileError, match=f"{config} is not read: {target} can be changed by every user"):
        Settings()
    monkeypatch.setenv("LAMBDA_CONFIG", str(config))
    with pytest.raises(SettingsFileError, match="can be changed by every user"):
        Settings()
    target.chmod(target.stat().st_mode & ~stat.S_IWOTH)
    assert str(Settings().stack.java_home) == "/tmp/elsewhere"


def test_a_lambda_toml_in_a_sticky_shared_folder_is_read(tmp_path, monkeypatch):
    import stat

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp: others cannot replace the user's own file
    (shared / "lambda.toml").write_text("[kafka]\nport = 29092\n")
    monkeypatch.setenv("LAMBDA_CONFIG", str(shared / "lambda.toml"))
    assert Settings().kafka.port == 29092
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777


@pytest.mark.parametrize(
    "section, values, words",
    [
        ("airflow", {"admin_user": "ops:admin,evil"}, "admin_user"),  # Airflow reads "name:role,name:role"
        ("cassandra", {"keyspace": "Lambda"}, "keyspace"),  # folded to lambda unquoted, USE'd quoted
        ("cassandra", {"keyspace": "a b; DROP"}, "keyspace"),
        ("kafka", {"heap_mb": -1}, "heap_mb"),  # -Xmx-1m
        ("cassandra", {"health_timeout_s": -5}, "health_timeout_s"),
        ("api", {"health_timeout_s": 0}, "health_timeout_s"),
        ("stack", {"restart_backoff_s": 30, "restart_backoff_max_s": 5}, "restart_backoff_max_s"),
        # The waits before restart_max restarts outlast the window: a process dying at once was
        # restarted for ever (10,167 restarts a day), never given up.
        ("stack", {"restart_window_s": 30}, "restart_window_s"),
        ("stack", {"restart_backoff_s": 30, "restart_window_s": 100}, "restart_window_s"),
        # Airflow interpolates % in the defaults it builds on its home: every component failed at import.
        ("airflow", {"home": "/srv/100%airflow"}, "home"),
        # Kafka's JAAS parser ends a quoted value at a line break: the rest set another option.
        ("kafka", {"sasl_username": "u", "sasl_password": "pw\nusername=admin; /"}, "sasl_password"),
        ("kafka", {"sasl_username": "u\x00"}, "sasl_username"),
        ("cassandra", {"username": "u\r\n"}, "username"),
        ("cassandra", {"password": "p\n"}, "password"),
        # Written into hbase-site.xml, where Hadoop expands ${...}; relative, it was the state dir's.
        ("hbase", {"rootdir": "${env.HOME}/hb"}, "rootdir"),
        ("hbase", {"rootdir": "hbase/data"}, "rootdir"),
        ("hbase", {"rootdir": "/srv/hb ase"}, "rootdir"),
        ("hbase", {"rootdir": "file:///srv/hb\nx"}, "rootdir"),
        # A Spark launcher refuses an unbalanced quote (every job failed, naming no setting), and an
        # executor's looser parser let it swallow the UTC zone the platform appends.
        ("spark", {"jvm_options": '-Dx="a'}, "jvm_options"),
        ("spark", {"jvm_options": "-Dx=a\\"}, "jvm_options"),
        ("spark", {"jvm_options": "-D'user.timezone'=Asia/Tokyo"}, "jvm_options"),
        ("batch", {"jvm_options": "-Dx='a"}, "jvm_options"),
        ("spark", {"conf": {"spark.driver.extraJavaOptions": '-Dy="b'}}, "extraJavaOptions"),
        ("spark", {"master": ""}, "master"),
        ("spark", {"master": "local[0]"}, "master"),
        ("spark", {"master": "spark//host:7077"}, "master"),
        # The wildcard is no address a client reaches, nor one a store advertises (Kafka and
        # Cassandra refuse it, and died at start: a health timeout, naming no setting).
        ("kafka", {"host": "0.0.0.0"}, "host"),
        ("cassandra", {"hosts": ["0.0.0.0"]}, "hosts"),
        ("cassandra", {"hosts": ["::"]}, "hosts"),
        ("cassandra", {"local_dc": "dc1\n"}, "local_dc"),
        ("cassandra", {"replication": {"dc1": 1}, "local_dc": "DC1"}, "local_dc"),
        # Relative, each was looked up from the folder the process runs in, not the command's.
        ("stack", {"java_home": "jdk17"}, "java_home"),
        ("airflow", {"venv": "venv-airflow"}, "venv"),
        ("kafka", {"security_protocol": "SSL", "ssl_cafile": "ca.pem"}, "ssl_cafile"),
        ("cassandra", {"ssl": True, "ssl_cafile": "certs/ca.pem"}, "ssl_cafile"),
    ],
)
def test_values_no_process_could_run_with_are_refused_naming_the_setting(section, values, words):
    with pytest.raises(pydantic.ValidationError, match=words):
        Settings(**{section: values})


@pytest.mark.parametrize(
    "section, values",
    [
        ("spark", {"master": "local"}),
        ("spark", {"master": "local[2]"}),
        ("spark", {"master": "local[*, 3]".replace(" ", "")}),
        ("spark", {"master": "local-cluster[2,1,1024]"}),
        ("spark", {"master": "spark://h1:7077,h2:7077"}),
        ("spark", {"master": "yarn"}),
        ("spark", {"master": "k8s://https://k8s.example.org:6443"}),
        ("spark", {"jvm_options": "-XX:+UseG1GC -Dname='a b' -Dq=\"c d\" -Duser.timezone=UTC"}),
        ("hbase", {"rootdir": "hdfs://namenode:8020/hbase"}),
        ("hbase", {"rootdir": "file:///srv/hbase"}),
        ("hbase", {"rootdir": "/srv/hbase"}),
        ("hbase", {"rootdir": "hdfs:///hbase"}),  # fs.defaultFS's namenode
        ("hbase", {"rootdir": "file:/srv/hbase"}),
        ("hbase", {"rootdir": "s3a://bucket/hbase"}),
        ("cassandra", {"replication": {"dc1": 1}, "local_dc": "dc1"}),
        # QUORUM: a coordinator in a data centre holding no copy forwards the request.
        ("cassandra", {"replication": {"dc1": 1}, "local_dc": "dc3", "consistency": "QUORUM"}),
        ("spark", {"jvm_options": "-Duser.timezone=\"UTC\" '-Duser.timezone=Etc/UTC'"}),
        ("spark", {"cluster": {"host": "0.0.0.0"}}),
        ("hdfs", {"host": "0.0.0.0"}),
        ("kafka", {"sasl_username": "ops", "sasl_password": 'p@ss wörd;"x\\'}),
        ("airflow", {"venv": "/opt/airflow-venv"}),
    ],
)
def test_values_a_process_runs_with_are_taken(section, values):
    Settings(**{section: values})


def test_secrets_of_cloud_stores_are_hidden_from_the_drivers_command_line_and_config():
    from definitions.spark import LAUNCH_HIDDEN

    for key in (
        "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net",
        "spark.hadoop.google.cloud.auth.service.account.json.keyfile",
        "spark.hadoop.fs.s3a.access.key",
        "spark.authenticate.secret",
        "spark.hadoop.fs.gs.auth.service.account.credentials",
        "spark.hadoop.fs.gs.auth.service.account.private.key",
        "spark.hadoop.fs.s3a.encryption.key",
        "spark.hadoop.fs.s3a.bucket.b.encryption.key",
        "spark.hadoop.fs.swift.service.x.apikey",
        "spark.executorEnv.DB_PASS",
    ):
        assert LAUNCH_HIDDEN.search(key), key
    for key in ("spark.driver.memory", "spark.sql.shuffle.partitions", "spark.hadoop.dfs.replication"):
        assert not LAUNCH_HIDDEN.search(key), key


@pytest.mark.parametrize("name", ["state_dir", "jars_dir"])
def test_a_path_with_a_semicolon_is_refused_naming_it(name, tmp_path):
    """supervisord's configuration takes ` ;` for the start of a comment: a state directory named
    `a ;b` cut every program's command there and no program started."""
    with pytest.raises(ValueError, match=rf"{name}[\s\S]*';'"):
        Settings(**{name: tmp_path / "a ;b"})
    assert getattr(Settings(**{name: tmp_path / "a b"}), name) == tmp_path / "a b", "a space alone is fine"


@pytest.mark.parametrize(
    "given, words",
    [
        # the archiver wrote every record that is no event back onto the topic it reads, for ever
        ({"kafka": {"dlq_topic": "events"}}, "must not be the events topic"),
        ({"kafka": {"events_topic": ""}}, "events_topic"),
        ({"kafka": {"dlq_topic": ".."}}, "no Kafka topic name"),
        # supervisord strips quotes: every process read its settings from another directory
        ({"state_dir": "/srv/it's'"}, "must not contain"),
        ({"state_dir": "/srv/a\\b"}, "must not contain"),  # a Java-properties escape in Kafka's log.dirs
        ({"state_dir": "/srv/${user.name}"}, "must not contain"),  # expanded by Hadoop and log4j
        ({"state_dir": "/srv/100%d"}, "must not contain"),  # a logback pattern
        ({"spark": {"driver_memory": "lots"}}, "driver_memory"),
        # another zone put a UTC day's last hours in the next day's partition, which a cutoff left out
        ({"spark": {"conf": {"spark.sql.session.timeZone": "Asia/Tokyo"}}}, "must stay UTC"),
        ({"spark": {"conf": {"spark.executor.extraJavaOptions": "-Duser.timezone=EST"}}}, "-Duser.timezone"),
        # master files missing, damaged or outside the file sink's log skipped or counted without a word
        ({"spark": {"conf": {"spark.sql.files.ignoreMissingFiles": "true"}}}, "ignoreMissingFiles"),
        ({"spark": {"conf": {"spark.sql.files.ignoreCorruptFiles": "TRUE"}}}, "ignoreCorruptFiles"),
        ({"spark": {"conf": {"spark.sql.streaming.fileStreamSink.ignoreMetadata": "true"}}}, "ignoreMetadata"),
        ({"spark": {"jvm_options": "-XX:+UseG1GC -Duser.timezone=America/New_York"}}, "spark.jvm_options"),
        ({"batch": {"jvm_options": "-Duser.timezone=Asia/Tokyo"}}, "batch.jvm_options"),
        # Cassandra refuses a default_time_to_live over 20 years: the speed layer could not start
        ({"speed": {"ttl_s": 700_000_000}}, "ttl_s"),
        ({"batch": {"interval_s": 70_000_000}}, "batch.interval_s"),
        ({"speed": {"gc_grace_s": 2**31}}, "gc_grace_s"),
        ({"speed": {"trigger_s": 1e-5}}, "trigger_s"),  # "1e-05 seconds": Spark refused it at start
        ({"archiver": {"trigger_s": 400}}, "three triggers"),  # a job would look stuck for ever
        ({"archiver": {"driver_memory": "1g -XX:+Foo"}}, "driver_memory"),
        ({"archiver": {"checkpoint_dir": "lambda/ck"}}, "checkpoint_dir"),  # hdfs://host:9000lambda/ck
        ({"archiver": {"master_path": ""}}, "master_path"),
        ({"speed": {"checkpoint_dir": "/lambda/checkpoints/archiver/x"}}, "must not be archiver.checkpoint_dir"),
        ({"speed": {"checkpoint_dir": "/lambda/master/events"}}, "or inside it"),
        # HDFS resolves `..`: this checkpoint was inside the master dataset, past the comparison
        ({"speed": {"checkpoint_dir": "/lambda/checkpoints/speed/../../master/events/x"}}, "speed.checkpoint_dir"),
        ({"archiver": {"master_path": "/lambda/./master"}}, "archiver.master_path"),
        ({"speed": {"checkpoint_dir": "/lambda/master//events/cp"}}, "speed.checkpoint_dir"),  # HDFS drops the //
        ({"stack": {"progress_dir": "/lambda/progress/"}}, "stack.progress_dir"),
        # report retention deletes files named like reports there: the archiver's markers sort below them
        ({"batch": {"reports_path": "/lambda/master/completeness"}}, "batch.reports_path"),
        ({"batch": {"reports_path": "/"}}, "inside it"),
        ({"stack": {"progress_dir": "/p\nx:y z"}}, "stack.progress_dir"),
        # the ticker sent and flushed ticks with no pause: the topic filled, both jobs never idled
        ({"archiver": {"tick_interval_s": 1e-9}}, "tick_interval_s"),
        # Python's waits overflow on such a timeout: an exhausted pool answered 500, not 503
        ({"api": {"hbase_pool_wait_s": 1e308}}, "api.hbase_pool_wait_s"),
        ({"api": {"max_body_bytes": 10**15}}, "api.max_body_bytes"),  # no body limit left at all
        ({"stack": {"stuck_after_s": float("inf")}}, "stack.stuck_after_s"),
        (  # a sibling sorting between the two hid the nesting from a comparison of neighbours
            {
                "archiver": {"checkpoint_dir": "/lambda/ck", "master_path": "/lambda/ck.x"},
                "speed": {"checkpoint_dir": "/lambda/ck/speed"},
            },
            "speed.checkpoint_dir (/lambda/ck/speed) must not be archiver.checkpoint_dir",
        ),
    ],
)
def test_settings_that_would_break_a_store_or_mix_two_jobs_data_are_refused(given, words):
    with pytest.raises(pydantic.ValidationError, match=re.escape(words)):
        Settings(**given)


def test_the_jars_directory_refuses_only_what_its_own_uses_split_on():
    """The jars directory is the checkout's: `$`, `%`, `\\` or `?` break the stores' files, which
    live in the state directory, not a classpath."""
    assert Settings(jars_dir="/home/dollar$/x").jars_dir.name == "x"
    with pytest.raises(pydantic.ValidationError, match="jars_dir"):
        Settings(jars_dir="/home/o'brien/x")


@pytest.mark.parametrize(
    "values, words",
    [
        ({"database_url": "postgresql://ops:pa$HOME@db/airflow"}, "%24"),
        ({"admin_user": "$USER"}, "must not contain $"),
        ({"admin_user": "~root"}, "must not start with ~"),
        ({"home": "~/airflow"}, "must not start with ~"),
        ({"home": "airflow-home"}, "absolute path"),
        ({"home": "/srv/air\nflow"}, "control character"),
    ],
)
def test_values_airflow_would_expand_into_others_are_refused(values, words):
    """Airflow runs expandvars and expanduser on every value it reads from its environment: a `$` in
    the database password reached SQLAlchemy as another password, `$USER` as another user name."""
    with pytest.raises(pydantic.ValidationError, match=re.escape(words)) as refused:
        Settings(airflow=values)
    assert "pa$HOME" not in str(refused.value), "the database URL (a secret) is not repeated"


def test_a_database_url_with_a_percent_encoded_dollar_and_an_absolute_home_are_taken(tmp_path):
    given = Settings(airflow={"database_url": "postgresql://ops:pa%24s@db/airflow", "home": str(tmp_path)})
    assert given.airflow.database_url.get_secret_value().endswith("pa%24s@db/airflow")


def test_every_number_a_setting_takes_is_bounded_above():
    """A huge or infinite number passed validation and failed in use: a wait Python cannot make, a
    limit that no longer limits, a loop with no pause. Each numeric setting has an upper bound."""
    import typing

    import annotated_types
    from pydantic import BaseModel

    unbounded = []
    checked_by_a_validator = {"stack.cpu_nice"}  # 0 to 19, refused naming the process

    def bounded(metadata) -> bool:
        flat = [n for m in metadata for n in (getattr(m, "metadata", None) or [m])]  # Field(...) holds its own
        return any(isinstance(m, (annotated_types.Le, annotated_types.Lt)) for m in flat)

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            kinds = typing.get_args(field.annotation) or (field.annotation,)
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                walk(field.annotation, f"{prefix}{name}.")
            elif typing.get_origin(field.annotation) is dict:  # a map's numbers: its value type's bound
                value = kinds[1]
                numbers = typing.get_args(value)[:1] or (value,)
                if numbers[0] in (int, float) and not bounded(typing.get_args(value)[1:]):
                    if f"{prefix}{name}" not in checked_by_a_validator:
                        unbounded.append(f"{prefix}{name}")
            elif any(k in (int, float) for k in kinds) and not bounded(field.metadata):
                unbounded.append(f"{prefix}{name}")

    walk(Settings, "")
    assert unbounded == []
