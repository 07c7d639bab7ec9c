"""The JVM stores' logs rotate by size when the stack starts them: they log to the console, which the
supervisor writes to `<state_dir>/logs/<name>.log` and rotates. Kafka, an HDFS namenode and Cassandra
of their own, started with a tiny rotation size, rotate their logs for real (on free ports in a
temporary state dir)."""

from __future__ import annotations

import socket

from definitions.settings import Settings
from infra.stack import Stack

PIPE_READ_BYTES = 2 << 16  # the most supervisord reads from a program's output at once


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
        # supervisord writes what it read from the program's pipe at once (up to 128 KiB a read),
        # then rotates: one read may end a file past the limit, no file grows further.
        bound = max_bytes + PIPE_READ_BYTES
        assert older.stat().st_size <= bound and current.stat().st_size <= bound
        assert not (logs / f"{name}.log.3").exists(), "two older files are kept, no more"
    assert any("INFO" in (logs / f"{n}.log").read_text() + (logs / f"{n}.log.1").read_text() for n in names)
