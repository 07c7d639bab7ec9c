"""A batch-view table is loaded without HBase's write-ahead log (stores/batch_writer.py), then
flushed: its cells survive the HBase process being killed (SIGKILL) and started again. On an HBase of
its own (free ports, a temporary state dir), so the shared stack is not disturbed."""

from __future__ import annotations

import os
import signal
import socket

import pytest

from definitions.settings import Settings
from definitions.views import PAGE_VIEWS
from infra.bootstrap import create_namespace
from infra.errors import StackError
from infra.process import ProcessSupervisor
from infra.stack import Stack
from stores.batch_writer import TableStats, create_table, flush_table, table_stats, write_partitions


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _own_settings(settings: Settings, state_dir) -> Settings:
    ports = ("thrift", "thrift_info", "master", "master_info", "regionserver", "regionserver_info", "zookeeper")
    return Settings(
        state_dir=state_dir,
        jars_dir=settings.jars_dir,
        hbase={**{f"{p}_port": _free_port() for p in ports}, "health_timeout_s": 240},
        stack={"managed_services": ["hbase", "hbase-thrift"]},
    )


@pytest.fixture
def own_hbase(settings, tmp_path):
    # A port found free can be taken before HBase binds it (another process's outgoing connection):
    # then once more on other ports.
    for attempt in (1, 2):
        own = _own_settings(settings, tmp_path / f"state-{attempt}")
        stack = Stack(own, ["hbase", "hbase-thrift"])
        try:
            assert set(stack.up().values()) == {"started"}
            break
        except StackError:
            stack.down()
            if attempt == 2:
                raise
    try:
        create_namespace(own)
        yield own, stack
    finally:
        stack.down()


def test_a_flushed_unlogged_load_survives_the_region_server_being_killed(own_hbase, spark):
    own, stack = own_hbase
    rows = [(f"/p{i % 97}", 1_795_000_000 + 60 * (i // 97), i + 1) for i in range(5_000)]
    computed = spark.createDataFrame(rows, "url STRING, event_bucket BIGINT, value BIGINT").repartition(3)
    create_table(own, "page_views_v1")
    written = write_partitions(own, "page_views_v1", PAGE_VIEWS, "minute", computed)
    assert written == TableStats(5_000, 5_000, sum(r[2] for r in rows))
    flush_table(own, "page_views_v1")

    hbase = ProcessSupervisor(own.state_dir).process("hbase")
    assert hbase is not None
    os.kill(hbase.pid, signal.SIGKILL)
    hbase.wait(timeout=30)
    assert set(stack.up().values()) >= {"started"}, "HBase starts again"

    assert table_stats(own, "page_views_v1", PAGE_VIEWS) == written, "every cell is still there"
