"""The stack manager: idempotent up, clean down, clear errors naming the failing service."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import psutil
import pytest

from definitions.settings import Settings
from infra.errors import StackError
from infra.java import find_java
from infra.process import STATE_TAG
from infra.stack import Stack
from stores import health


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _isolated_kafka(settings: Settings, tmp_path, port: int | None = None) -> Settings:
    """Settings for a Kafka of its own: fresh state dir, free ports, the same jars."""
    return Settings(
        state_dir=tmp_path / "state",
        jars_dir=settings.jars_dir,
        kafka={
            "port": port or _free_port(),
            "controller_port": _free_port(),
            "sasl_listener_port": 0,
            "ssl_listener_port": 0,
            "health_timeout_s": 60,
        },
        stack={"managed_services": ["kafka"], "stop_timeout_s": 20},
    )


def _tagged(state_dir) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(STATE_TAG) == str(state_dir):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_up_twice_changes_nothing(settings, stack):
    before = {s.name: (s.pid, s.healthy) for s in stack.status()}
    assert all(healthy for _, healthy in before.values()), before
    outcome = Stack(settings).up()
    assert set(outcome.values()) == {"already running"}
    after = {s.name: (s.pid, s.healthy) for s in stack.status()}
    assert after == before


def test_cli_up_on_running_stack_is_a_no_op(settings, stack):
    done = subprocess.run([sys.executable, "-m", "lambdactl.cli", "up"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "nothing changed" in done.stderr


def test_down_leaves_no_process_behind(settings, tmp_path):
    own = _isolated_kafka(settings, tmp_path)
    isolated = Stack(own, ["kafka"])
    try:
        assert isolated.up() == {"kafka": "started"}
        assert _tagged(own.state_dir), "the started broker carries the state-dir tag"
        pid = isolated.supervisor.record("kafka").pid
    finally:
        outcome = isolated.down()
    assert outcome == {"kafka": "stopped"}
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert _tagged(own.state_dir) == []
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", own.kafka.port)) != 0
    assert isolated.down() == {"kafka": "was not running"}


def test_a_store_that_dies_is_restarted_by_the_supervisor(settings, tmp_path):
    # kill -9 of a store's JVM: the supervisor starts it again by itself, and it answers again.
    own = _isolated_kafka(settings, tmp_path)
    isolated = Stack(own, ["kafka"])
    try:
        assert isolated.up() == {"kafka": "started"}
        first = isolated.supervisor.process("kafka")
        assert first is not None
        first.kill()
        deadline = time.monotonic() + 120
        again = None
        while time.monotonic() < deadline:
            again = isolated.supervisor.process("kafka")
            if again is not None and again.pid != first.pid:
                try:
                    health.kafka(own)
                    break
                except Exception:  # still starting
                    pass
            time.sleep(0.5)
        else:
            raise AssertionError(f"kafka did not come back healthy within 120s (now: {again})")
        [row] = [r for r in isolated.status() if r.name == "kafka"]
        assert row.healthy and row.restarts == 1, row
        assert "SIGKILL" in row.restart_detail, row
    finally:
        isolated.down()
    assert _tagged(own.state_dir) == []


def test_port_taken_is_reported_with_the_service_name(settings, tmp_path):
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    port = blocker.getsockname()[1]
    try:
        own = _isolated_kafka(settings, tmp_path, port=port)
        with pytest.raises(StackError) as err:
            Stack(own, ["kafka"]).up()
        assert err.value.service == "kafka"
        assert f"port {port}" in str(err.value) and "already in use" in str(err.value)
        assert _tagged(own.state_dir) == []
    finally:
        blocker.close()


def test_service_that_dies_is_named_with_its_log_tail(settings, tmp_path):
    # A heap too small for the broker: it starts, then dies; the error says which and shows the log.
    own = Settings(
        state_dir=tmp_path / "state",
        jars_dir=settings.jars_dir,
        kafka={
            "port": _free_port(),
            "controller_port": _free_port(),
            "sasl_listener_port": 0,
            "ssl_listener_port": 0,
            "heap_mb": 8,
            "health_timeout_s": 60,
        },
        stack={"managed_services": ["kafka"], "restart_max": 0},
    )
    stack = Stack(own, ["kafka"])
    try:
        with pytest.raises(StackError) as err:
            stack.up()
    finally:
        stack.down()
    assert err.value.service == "kafka"
    assert _tagged(own.state_dir) == [], "down stopped the supervisor of a stack whose only program gave up"
    assert "keeps dying: the supervisor gave up" in err.value.reason
    assert "out of memory" in err.value.reason
    assert err.value.log_tail.strip()


def test_missing_java_is_reported(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(StackError) as err:
        find_java("")
    assert err.value.service == "java"


def test_unknown_service_is_refused(settings):
    with pytest.raises(StackError, match="unknown service"):
        Stack(settings, ["kafka", "zookeeper"])
