"""The JVM stores' logs rotate by size when the stack starts them: the rolling configurations made
from infra/templates (unit), and Kafka, an HDFS namenode and Cassandra of their own, started with a
tiny rotation size, rotating their logs for real (integration, on free ports in a temporary state dir)."""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET

import pytest

from definitions.settings import Settings
from infra.services import TEMPLATES
from infra.stack import Stack
from infra.store_logs import log4j_rolling, logback_rolling, with_rolling_logs


def _properties(text: str) -> dict[str, str]:
    """Key → value as a properties file means it: the last line of a key wins."""
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


@pytest.mark.parametrize("template", ["kafka/log4j.properties", "hadoop/log4j.properties"])
def test_log4j_console_appenders_become_size_rotated_files(template, tmp_path):
    console = (TEMPLATES / template).read_text()
    props = _properties(log4j_rolling(console, tmp_path / "logs" / "x.log", 123_456, 4))
    appenders = [a.strip() for a in props["log4j.rootLogger"].split(",")[1:]]
    assert appenders
    for name in appenders:
        assert props[f"log4j.appender.{name}"] == "org.apache.log4j.RollingFileAppender"
        assert props[f"log4j.appender.{name}.File"] == str(tmp_path / "logs" / "x.log")
        assert props[f"log4j.appender.{name}.MaxFileSize"] == "123456"
        assert props[f"log4j.appender.{name}.MaxBackupIndex"] == "4"
        assert props[f"log4j.appender.{name}.layout"] == "org.apache.log4j.PatternLayout", "the layout is kept"
    assert _properties(console).items() - props.items() == {
        (f"log4j.appender.{n}", "org.apache.log4j.ConsoleAppender") for n in appenders
    }, "nothing else changes"


def test_logback_console_appender_becomes_a_size_rotated_file(tmp_path):
    console = (TEMPLATES / "cassandra/logback.xml").read_text()
    root = ET.fromstring(logback_rolling(console, tmp_path / "a&b" / "cassandra.log", 99_999, 30))
    [appender] = root.findall("appender")
    assert appender.get("class") == "ch.qos.logback.core.rolling.RollingFileAppender"
    assert appender.findtext("file") == str(tmp_path / "a&b" / "cassandra.log")
    assert appender.findtext("triggeringPolicy/maxFileSize") == "99999"
    assert appender.findtext("triggeringPolicy/checkIncrement") == "0 milliseconds", "every event, not once a minute"
    assert appender.findtext("rollingPolicy/maxIndex") == "20", "logback keeps at most 20 older files"
    assert appender.findtext("encoder/pattern") == ET.fromstring(console).findtext("appender/encoder/pattern")
    assert [r.get("ref") for r in root.findall("root/appender-ref")] == [appender.get("name")]


def test_only_the_stores_command_line_points_at_the_rolling_configuration(tmp_path):
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "log4j.properties").write_text((TEMPLATES / "kafka/log4j.properties").read_text())
    command = [
        "java",
        "-Xmx1m",
        f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
        "-cp",
        "x",
        "kafka.Kafka",
        "a",
    ]
    rolled = with_rolling_logs("kafka", command, conf, tmp_path / "kafka.log", 20_000, 2)
    assert rolled == [
        "java",
        "-Xmx1m",
        f"-Dlog4j.configuration=file:{conf / 'log4j-kafka.properties'}",
        "-cp",
        "x",
        "kafka.Kafka",
        "a",
    ]
    assert (conf / "log4j-kafka.properties").is_file()
    api = ["python", "-m", "api.server"]
    assert with_rolling_logs("api", api, conf, tmp_path / "api.log", 20_000, 2) == api


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_stores_started_by_the_stack_rotate_their_logs(settings, tmp_path):
    max_bytes = 16 * 1024
    own = Settings(
        state_dir=tmp_path / "state",
        jars_dir=settings.jars_dir,
        kafka={
            "port": _free_port(),
            "controller_port": _free_port(),
            "sasl_listener_port": _free_port(),
            "ssl_listener_port": _free_port(),
            "health_timeout_s": 120,
        },
        hdfs={"port": _free_port(), "http_port": _free_port(), "health_timeout_s": 180},
        cassandra={"port": _free_port(), "storage_port": _free_port(), "health_timeout_s": 300},
        stack={
            "managed_services": ["kafka", "hdfs-namenode", "cassandra"],
            "log_max_bytes": max_bytes,
            "log_backups": 2,
        },
    )
    names = ["kafka", "hdfs-namenode", "cassandra"]
    stack = Stack(own, names)
    try:
        assert set(stack.up().values()) == {"started"}
    finally:
        stack.down()
    logs = own.state_dir / "logs"
    for name in names:
        current, older = logs / f"{name}.log", logs / f"{name}.log.1"
        assert older.is_file(), f"{name} rotated its log at {max_bytes} bytes: {sorted(p.name for p in logs.iterdir())}"
        # A line that crosses the limit may end a file; no file grows far past it.
        assert older.stat().st_size < 2 * max_bytes and current.stat().st_size < 2 * max_bytes
        assert not (logs / f"{name}.log.3").exists(), "two older files are kept, no more"
    assert any("INFO" in (logs / f"{n}.log").read_text() + (logs / f"{n}.log.1").read_text() for n in names)
