"""Settings values that were taken and then broke something later, far from the setting: each is
refused when the settings load, naming the setting and what is wrong."""

from __future__ import annotations

import pydantic
import pytest

from definitions.settings import Settings
from definitions.spark import session_conf


def refused(**sections) -> str:
    with pytest.raises(pydantic.ValidationError) as error:
        Settings(_env_file=None, **sections)
    return str(error.value)


@pytest.mark.parametrize(
    "section, values",
    [
        ("kafka", {"host": "::1"}),  # bootstrap ::1:9092: kafka-python reads one IPv6 address, Java ::1 and a port
        ("hdfs", {"host": "[::1]"}),
        ("hbase", {"host": "fe80::1%eth0"}),  # int('1%eth0') when the Thrift endpoints were split
        ("api", {"host": "::1"}),
        ("airflow", {"host": "2001:db8::7"}),
        ("kafka", {"host": "[broker]"}),
        ("hdfs", {"host": "nn%eth0"}),
        ("hbase", {"host": "[::]"}),  # every address, where only the API and Airflow listen: int(']')
        ("kafka", {"host": "::"}),
    ],
)
def test_an_ipv6_address_where_it_is_joined_to_a_port_is_refused_naming_the_setting(section, values):
    message = refused(**{section: values})
    assert f"{section}.host" in message and "is not taken here" in message


def test_addresses_used_alone_or_listening_everywhere_stay_taken():
    settings = Settings(_env_file=None, cassandra={"hosts": ["::1", "[fe80::1]"]}, api={"host": "::"})
    assert settings.cassandra.hosts == ["::1", "[fe80::1]"] and settings.api.host == "::"


@pytest.mark.parametrize(
    "section, values, named",
    [
        ("kafka", {"bootstrap_servers": ["::1:9092"]}, "kafka.bootstrap_servers"),  # one address to kafka-python
        ("kafka", {"bootstrap_servers": ["http://b1/x:9092"]}, "kafka.bootstrap_servers"),
        ("hbase", {"thrift_hosts": ["http://thrift-1:9090"]}, "hbase.thrift_hosts"),
        ("hbase", {"thrift_hosts": ["[::1]:9090"]}, "hbase.thrift_hosts"),  # int('1]') when split
        ("hbase", {"thrift_hosts": ["::1"]}, "hbase.thrift_hosts"),
        ("hdfs", {"name_service": "a b:1/x"}, "name_service"),  # hdfs://a b:1/x
        ("hdfs", {"webhdfs_urls": ["http://"]}, "hdfs.webhdfs_urls"),
        ("hdfs", {"webhdfs_urls": ["http://nn1:99999"]}, "hdfs.webhdfs_urls"),
        ("hdfs", {"webhdfs_urls": ["http://nn1:9870?user.name=x"]}, "hdfs.webhdfs_urls"),
        ("hdfs", {"webhdfs_urls": ["http://nn1:9870/\nx"]}, "hdfs.webhdfs_urls"),  # urlsplit drops the line break
        ("hdfs", {"webhdfs_urls": ["http://nn 1:9870"]}, "hdfs.webhdfs_urls"),
        ("cassandra", {"hosts": []}, "hosts"),  # a cluster with no contact point
    ],
)
def test_an_address_list_entry_no_client_could_reach_is_refused_naming_the_setting(section, values, named):
    assert named in refused(**{section: values})


def test_the_addresses_clusters_use_are_taken():
    """What Kafka's clients (Java and kafka-python) read in a broker address: a listener name, an
    IPv6 address in brackets; a WebHDFS URL with a gateway's path and login, or an IPv6 address."""
    brokers = ["b1.example.org:9092", "10.0.0.2:9092", "SASL_SSL://b3:9093", "[2001:db8::1]:9092"]
    urls = ["http://nn1:9870/", "https://svc:pw@knox:8443/gateway/default", "http://[fd00::1]:9870"]
    settings = Settings(
        _env_file=None,
        kafka={"bootstrap_servers": brokers},
        hbase={"thrift_hosts": ["thrift-1", "thrift-2:9091"]},
        hdfs={"name_service": "lambda-ha", "webhdfs_urls": urls},
    )
    assert settings.kafka.bootstrap == ",".join(brokers)
    assert settings.hbase.thrift_endpoints == [("thrift-1", 9090), ("thrift-2", 9091)]
    assert settings.hdfs.webhdfs_endpoints == [u.rstrip("/") for u in urls]


def test_a_refused_webhdfs_url_is_not_repeated_in_the_error():
    message = refused(hdfs={"webhdfs_urls": ["http://nn1:9870", "https://svc:S3cretPw@knox:8443/x?q=1"]})
    assert "hdfs.webhdfs_urls: entry 2 is not" in message and "S3cretPw" not in message


def test_a_bracketed_ipv6_contact_point_reaches_the_cassandra_driver_without_brackets():
    from stores.clients import cassandra_cluster

    settings = Settings(_env_file=None, cassandra={"hosts": ["[::1]", "127.0.0.1"]})
    assert cassandra_cluster(settings).contact_points == ["::1", "127.0.0.1"]


@pytest.mark.parametrize("modules", [[".relative"], ["..up"], ["my-views"], ["views."]])
def test_view_modules_no_process_could_import_are_refused_when_the_settings_load(modules):
    """Every process imports them at start: `lambdactl up` ended in a TypeError's traceback."""
    assert "views.modules\n  Value error, not module names" in refused(views={"modules": modules})


@pytest.mark.parametrize(
    "section, values",
    [
        ("spark", {"driver_memory": "0m"}),
        ("archiver", {"driver_memory": "1k"}),
        ("batch", {"driver_memory": "99999999999999999999g"}),
        ("speed", {"driver_memory": "256m"}),  # Spark refuses to start below 450 MiB
    ],
)
def test_a_driver_memory_spark_cannot_start_with_is_refused_naming_the_setting(section, values):
    message = refused(**{section: values})
    assert f"{section}.driver_memory\n" in message
    assert "give at least 512m" in message or "more than 1t" in message


def test_an_executor_memory_spark_cannot_start_with_is_refused_naming_the_setting():
    assert "executor_memory" in refused(spark={"cluster": {"executor_memory": "0m"}})


@pytest.mark.parametrize(
    "key, setting",
    [
        ("spark.master", "spark.master"),  # the driver stayed bound to 127.0.0.1, out of a cluster's reach
        ("spark.driver.memory", "driver_memory"),
        ("spark.executor.memory", "spark.cluster.executor_memory"),
    ],
)
def test_a_spark_option_with_a_setting_of_its_own_is_refused_in_spark_conf(key, setting):
    message = refused(spark={"conf": {key: "x"}})
    assert f"{key} is not given here: it has a setting of its own (" in message and setting in message


def test_a_redaction_pattern_in_spark_conf_hides_more_never_less():
    """It replaced the pattern that hides the Kafka client's SASL login and private key."""
    settings = Settings(
        _env_file=None,
        spark={"conf": {"spark.sql.redaction.options.regex": "(?i)password", "spark.redaction.regex": "mine"}},
    )
    conf = session_conf(settings, "test")
    assert conf["spark.sql.redaction.options.regex"] == r"(?i)url|keystore\.key|sasl\.jaas\.config|(?:(?i)password)"
    assert conf["spark.redaction.regex"] == r"(?i)secret|password|token|access[.]?key|(?:mine)"
    assert "spark.redaction.regex" not in session_conf(Settings(_env_file=None), "test"), "Spark's default stays"


@pytest.mark.parametrize(
    "variable, value",
    [
        ("LAMBDA_SPARK__CONF__spark.driver.extraJavaOptions", "-Dx=1"),  # reached Spark as extrajavaoptions
        ("LAMBDA_CASSANDRA__REPLICATION__DC1", "3"),  # a data centre named dc1, which has no node
        ("lambda_spark__conf__spark.sql.adaptive.coalescePartitions.enabled", "false"),
    ],
)
def test_a_map_entry_whose_key_an_environment_variable_would_lower_case_is_refused(variable, value, monkeypatch):
    monkeypatch.setenv(variable, value)
    with pytest.raises(pydantic.ValidationError) as error:
        Settings(_env_file=None)
    assert variable in str(error.value) and "lower-cased" in str(error.value)


def test_map_entries_given_whole_or_with_lower_case_keys_are_taken(monkeypatch):
    monkeypatch.setenv("LAMBDA_SPARK__CONF", '{"spark.driver.extraJavaOptions": "-Dx=1"}')
    monkeypatch.setenv("LAMBDA_CASSANDRA__REPLICATION__dc1", "3")
    settings = Settings(_env_file=None)
    assert settings.spark.conf == {"spark.driver.extraJavaOptions": "-Dx=1"}
    assert settings.cassandra.replication == {"dc1": 3}


@pytest.mark.parametrize(
    "values, named",
    [
        ({"ingest_bucket_s": True}, "ingest_bucket_s"),  # one-second buckets
        ({"kafka": {"port": True}}, "port"),
        ({"speed": {"trigger_s": False}}, "trigger_s"),
        ({"archiver": {"tick_interval_s": True}}, "tick_interval_s"),  # float | None
        ({"cassandra": {"replication": {"dc1": True}}}, "replication"),  # a map of numbers
        ({"stack": {"cpu_nice": {"api": False}}}, "cpu_nice"),
    ],
)
def test_true_or_false_for_a_number_is_refused_naming_the_setting(values, named):
    assert f"{named}: " in refused(**values) and "is no number" in refused(**values)


def test_true_and_false_stay_taken_where_a_setting_is_one():
    assert Settings(_env_file=None, spark={"ui_enabled": True}).spark.ui_enabled is True


def test_an_api_and_airflow_listening_on_every_address_are_reached_on_the_loopback():
    """`http://:::8000` was no URL: `lambdactl views apply`, the demo and the health checks could not
    reach an API listening on ::."""
    from lambdactl.demo import _api
    from stores.airflow import base_url

    settings = Settings(_env_file=None, api={"host": "::"}, airflow={"host": "::"})
    assert _api(settings) == "http://127.0.0.1:8000" and base_url(settings) == "http://127.0.0.1:8080"


def test_listener_names_of_any_letters_digits_and_hyphens_and_a_zone_in_brackets_are_taken():
    """Kafka's clients take any listener name before `://` (kafka-python drops it, Java reads it
    as a name): Strimzi's are like PLAIN-9092. A link-local IPv6 address needs its zone."""
    brokers = ["PLAIN-9092://kafka-0.kafka-brokers.svc:9092", "EXTERNAL2://b1:9093", "[fe80::1%eth0]:9092"]
    assert Settings(_env_file=None, kafka={"bootstrap_servers": brokers}).kafka.bootstrap == ",".join(brokers)


def test_brokers_given_in_one_entry_separated_by_commas_are_each_checked():
    taken = Settings(_env_file=None, kafka={"bootstrap_servers": ["b1:9092,b2:9092"]})
    assert taken.kafka.bootstrap == "b1:9092,b2:9092"
    assert "kafka.bootstrap_servers" in refused(kafka={"bootstrap_servers": ["b1:9092,::1:9092"]})


@pytest.mark.parametrize(
    "section, values, named",
    [
        # uvicorn hands the brackets to bind(), which refuses them: a restart loop
        ("api", {"host": "[::]"}, "api.host"),
        ("airflow", {"host": "[::]"}, "airflow.host"),
        # HdfsCLI splits its URL on `;`: every WebHDFS call went to a host named by the login
        ("hdfs", {"webhdfs_urls": ["https://svc:pa;ss@knox.example.com:8443/gateway/default"]}, "hdfs.webhdfs_urls"),
        # Java's URI parser finds no host in a name with `_`: every Spark job failed
        ("hdfs", {"name_service": "prod_ns"}, "hdfs.name_service"),
        ("hdfs", {"host": "name_node"}, "hdfs.host"),
        # Spark's size parser and -Xmx read ASCII digits only
        ("spark", {"driver_memory": "１０２４m"}, "spark.driver_memory"),
        ("batch", {"driver_memory": "٢g"}, "batch.driver_memory"),
        # the driver resolved "cass1.example.com:9042" as a host name
        ("cassandra", {"hosts": ["cass1.example.com:9042"]}, "cassandra.hosts"),
        ("cassandra", {"hosts": ["[::1]:9042"]}, "cassandra.hosts"),
        # Spark's launcher refuses -Xmx in Java options: every Spark job failed to start
        ("spark", {"jvm_options": "-XX:+UseG1GC -Xmx4g"}, "spark.jvm_options"),
        ("batch", {"jvm_options": "-XX:+UseParallelGC -Xmx6g"}, "batch.jvm_options"),
        ("spark", {"conf": {"spark.executor.extraJavaOptions": "-Xmx1g"}}, "spark.executor.extraJavaOptions"),
        ("spark", {"conf": {"spark.driver.extraJavaOptions": "-Xmx64m"}}, "spark.driver.extraJavaOptions"),
        # a redaction pattern that is no pattern: every Spark session failed to start
        ("spark", {"conf": {"spark.redaction.regex": "("}}, "spark.redaction.regex is no regular expression"),
        ("spark", {"conf": {"spark.sql.redaction.options.regex": "[a-"}}, "spark.sql.redaction.options.regex"),
    ],
)
def test_a_value_a_client_or_launcher_reads_otherwise_is_refused_naming_the_setting(section, values, named):
    assert named in refused(**{section: values})


def test_the_same_kinds_of_values_spelled_as_clients_read_them_stay_taken():
    settings = Settings(
        _env_file=None,
        api={"host": "::"},
        hdfs={"name_service": "prod-ns", "host": "name-node.example"},
        cassandra={"hosts": ["cass1.example.com", "::1", "[fd00::2]", "fe80::1%eth0"]},
        spark={"driver_memory": "2048m", "conf": {"spark.driver.extraJavaOptions": "-XX:+UseG1GC -Xss4m"}},
    )
    assert settings.hdfs.name_service == "prod-ns" and settings.spark.driver_memory == "2048m"


def test_a_state_folder_reached_through_a_link_is_checked_where_it_leads(tmp_path):
    """The folder's path is written into the stores' configuration files: checked as given, and
    again once resolved."""
    target = tmp_path / "vol#1"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    message = refused(state_dir=str(tmp_path / "link" / "state"))
    assert "state_dir" in message and "'#'" in message


def test_a_password_in_a_webhdfs_url_is_masked_where_the_settings_are_shown():
    from definitions.settings_store import provenance

    settings = Settings(_env_file=None, hdfs={"webhdfs_urls": ["https://svc:S3cretPw@knox:8443/gateway"]})
    shown = dict((name, value) for name, value, _ in provenance(settings))
    assert "S3cretPw" not in str(shown["hdfs.webhdfs_urls"]) and "knox:8443" in str(shown["hdfs.webhdfs_urls"])
