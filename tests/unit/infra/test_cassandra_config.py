"""Cassandra's commit log durability comes from settings: `batch` (acknowledged = on disk) by default."""

from __future__ import annotations

import pytest

from definitions.settings import CassandraSettings, Settings
from infra.java import JavaRuntime
from infra.services import CASSANDRA


@pytest.mark.parametrize(
    "mode, lines",
    [
        ("batch", ["commitlog_sync: batch"]),
        ("group", ["commitlog_sync: group", "commitlog_sync_group_window: 15ms"]),
        ("periodic", ["commitlog_sync: periodic", "commitlog_sync_period: 10000ms"]),
    ],
)
def test_commitlog_mode_is_rendered(tmp_path, mode, lines):
    settings = Settings(state_dir=tmp_path, cassandra=CassandraSettings(commitlog_sync=mode))
    dirs = CASSANDRA.dirs(settings)
    CASSANDRA.render(settings, dirs, JavaRuntime.__new__(JavaRuntime))
    yaml = (dirs.conf / "cassandra.yaml").read_text().splitlines()
    assert [line for line in yaml if line.startswith("commitlog_sync")] == lines


def test_batch_is_the_default():
    assert Settings().cassandra.commitlog_sync == "batch"


def test_values_are_escaped_in_xml_and_a_line_break_is_refused(tmp_path):
    """A state directory such as /home/R&D broke hdfs-site.xml (the namenode did not start); one
    with a line break could add lines to a properties file."""
    import xml.etree.ElementTree as ET

    from infra.service_base import render_template

    target = tmp_path / "hdfs-site.xml"
    odd = tmp_path / "R&D"
    ports = dict(http_port=1, datanode_port=2, datanode_http_port=3, datanode_ipc_port=4, replication=1)
    render_template("hadoop/hdfs-site.xml", target, name_dir=odd / "n", data_dir=odd / "d", host="127.0.0.1", **ports)
    values = [p.findtext("value") for p in ET.parse(target).getroot()]
    assert f"file://{odd / 'n'}" in values
    with pytest.raises(ValueError, match="state_dir"):
        Settings(state_dir=tmp_path / "x\nlog4j.rootLogger=OFF")


@pytest.mark.parametrize("host, address", [("[::1]", "::1"), ("::1", "::1"), ("127.0.0.1", "127.0.0.1")])
def test_an_ipv6_host_is_one_address_in_cassandras_yaml(tmp_path, host, address):
    """`[::1]` unquoted is a YAML list: Cassandra did not start on an IPv6 loopback written the way
    the other hosts take it."""
    import yaml

    settings = Settings(state_dir=tmp_path, cassandra=CassandraSettings(hosts=[host]))
    dirs = CASSANDRA.dirs(settings)
    CASSANDRA.render(settings, dirs, JavaRuntime.__new__(JavaRuntime))
    doc = yaml.safe_load((dirs.conf / "cassandra.yaml").read_text())
    assert doc["listen_address"] == doc["rpc_address"] == address
    assert doc["seed_provider"][0]["parameters"][0]["seeds"] == address
