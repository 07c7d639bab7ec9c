"""Files the platform writes ask for the copies the settings name, as many as the local stack's
datanodes: Spark's HDFS client asked for its default (3) of one datanode, so every master file and
checkpoint stayed under-replicated for good. The local datanode syncs a block to disk when its file
is closed: a closed file is what the sink log and the completeness marker count as committed."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from definitions.settings import Settings
from definitions.spark import session_conf
from infra.service_base import ServiceDirs
from infra.store_services import _render_hdfs


@pytest.mark.parametrize("copies", [1, 3])
def test_spark_and_the_local_namenode_ask_for_the_copies_the_settings_name(tmp_path, copies):
    settings = Settings(_env_file=None, state_dir=tmp_path, hdfs={"replication": copies})
    assert session_conf(settings, "lambda-x")["spark.hadoop.dfs.replication"] == str(copies)
    assert _site(settings, tmp_path)["dfs.replication"] == str(copies)


def test_by_default_one_copy_on_the_local_stack_and_the_clusters_own_number_on_a_cluster(tmp_path):
    """Forcing one copy on a cluster's HDFS (its hdfs-site.xml says 3) would keep the master
    dataset in a single copy there."""
    local = Settings(_env_file=None, state_dir=tmp_path)
    assert "hdfs-datanode" in local.stack.managed_services
    assert session_conf(local, "lambda-x")["spark.hadoop.dfs.replication"] == "1"
    values = _site(local, tmp_path)
    assert values["dfs.replication"] == "1"
    assert values["dfs.datanode.synconclose"] == "true"
    cluster = Settings(_env_file=None, state_dir=tmp_path, stack={"managed_services": ["archiver", "api"]})
    assert "spark.hadoop.dfs.replication" not in session_conf(cluster, "lambda-x")


def _site(settings: Settings, tmp_path) -> dict:
    dirs = ServiceDirs(root=tmp_path / "hdfs")
    dirs.conf.mkdir(parents=True, exist_ok=True)
    _render_hdfs(settings, dirs, None)  # type: ignore[arg-type]
    site = ET.parse(dirs.conf / "hdfs-site.xml").getroot()
    return {p.findtext("name"): p.findtext("value") for p in site.iter("property")}


def test_no_file_asks_for_a_negative_number_of_copies(tmp_path):
    with pytest.raises(ValueError, match="replication"):
        Settings(_env_file=None, state_dir=tmp_path, hdfs={"replication": -1})
