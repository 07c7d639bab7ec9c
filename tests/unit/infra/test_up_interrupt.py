"""Ctrl-C while `lambdactl up` waits for services to become healthy ends the command at once: the
waits ran on in their threads until each health deadline (up to 300 s), and the interrupt with them."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from definitions.settings import Settings
from infra.stack import Stack
from infra.stack_waits import await_all, await_healthy


class NeverHealthy:
    name = "kafka"

    def timeout_s(self, settings) -> float:
        return 300.0

    def check(self, settings) -> str:
        raise ConnectionRefusedError("not yet")


def test_an_interrupt_while_waiting_for_health_ends_every_wait(tmp_path, monkeypatch):
    stack = Stack(Settings(state_dir=tmp_path / "state"), names=["kafka"])
    monkeypatch.setattr(stack.supervisor, "process", lambda name: object())  # it runs, never answers
    service = NeverHealthy()
    ctrl_c = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    ctrl_c.start()
    began = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            await_all(stack, [service], {service.name: "started"}, lambda line: None, lambda s: await_healthy(stack, s))
    finally:
        ctrl_c.cancel()  # a wait that ended otherwise must not have the session interrupted later
    took = time.monotonic() - began
    assert took < 4, f"the interrupt took {took:.1f} s to end the waits"
    assert not [t for t in threading.enumerate() if t.name.startswith("ThreadPoolExecutor")], "a wait runs on"


def test_a_restart_without_a_supervisor_answering_says_so(tmp_path):
    from infra.errors import StackError

    stack = Stack(Settings(state_dir=tmp_path / "state"), names=["api"])
    with pytest.raises(StackError, match=r"supervisor .*not answering.*lambdactl up"):
        stack.restart("api")


def test_up_with_other_ports_for_a_running_store_refuses_before_persisting_anything(tmp_path, monkeypatch):
    """`up` persisted the new port first, then waited 90 s for Kafka at a port it does not listen on;
    every later command then used the new port."""
    from definitions.settings_store import persist, persisted_path
    from infra.errors import StackError
    from tests.support.shell import plain_shell

    plain_shell(monkeypatch, tmp_path)
    persist(Settings())  # the stack was started with the default ports
    before = persisted_path(Settings()).read_text()
    monkeypatch.setenv("LAMBDA_KAFKA__PORT", "19092")
    stack = Stack(Settings(), names=["kafka"])
    monkeypatch.setattr(stack.supervisor, "process", lambda name: object())  # Kafka runs
    with pytest.raises(StackError, match=r"kafka runs at .*9092.*these settings say .*19092.*lambdactl down"):
        stack.up()
    assert persisted_path(Settings()).read_text() == before, "nothing persisted"
    monkeypatch.setattr(stack.supervisor, "process", lambda name: None)  # stopped: the new port is taken up
    assert stack._running_stores_moved() == []


def test_down_stops_a_store_started_before_it_was_taken_out_of_the_managed_services(tmp_path):
    """An operator moving Cassandra to a cluster takes it out of stack.managed_services: the local one
    an earlier `up` started kept running (and holding its port) after `down`, and `status` no longer
    listed it."""
    from infra.process import ProcessSupervisor

    state = tmp_path / "state"
    procs = ProcessSupervisor(state)
    record = procs.start("cassandra", ["sleep", "300"], tmp_path)  # what the earlier `up` started
    settings = Settings(state_dir=state, stack={"managed_services": ["kafka"]})
    outcome = Stack(settings).down()
    assert procs.process("cassandra") is None, "still running after down"
    assert outcome.get("cassandra") == "stopped", outcome
    assert not _alive(record.pid)


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
