"""A job whose store is down waits for it, saying which, instead of exiting (no services: the
stores are ports nobody listens on)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from definitions.settings import Settings
from stores.health import wait_until_up
from tests.support.polling import wait_for


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_waits_until_every_probe_answers_and_says_what_is_down(caplog):
    clock, calls = Clock(), {"n": 0}

    def flaky(settings) -> str:
        calls["n"] += 1
        if clock.now < 42:
            raise ConnectionRefusedError("connection refused")
        return "up"

    with caplog.at_level("WARNING"):
        waited = wait_until_up(
            Settings(),
            {"hdfs": flaky, "kafka": lambda s: "up"},
            log_every_s=30,
            poll_s=5,
            sleep=clock.sleep,
            clock=lambda: clock.now,
        )
    assert waited == 45 and calls["n"] == 10
    said = [r.getMessage() for r in caplog.records if "waiting for" in r.getMessage()]
    assert len(said) == 2, "once at once, once 30 s later"
    assert said[0] == "waiting for hdfs (0 s so far): hdfs: ConnectionRefusedError: connection refused"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(("module", "first"), [("ingest.archiver", "kafka"), ("speed_layer.job", "kafka")])
def test_a_job_started_while_its_stores_are_down_stays_up_waiting(tmp_path, module, first):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAMBDA_")}
    env.update(
        LAMBDA_ENVIRONMENT="development",
        LAMBDA_STATE_DIR=str(tmp_path / "state"),
        LAMBDA_KAFKA__PORT=str(_free_port()),
        LAMBDA_HDFS__HTTP_PORT=str(_free_port()),
        LAMBDA_CASSANDRA__PORT=str(_free_port()),
    )
    log = tmp_path / "job.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", module], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: f"waiting for {first}" in log.read_text(), f"{module} to say it waits", timeout_s=60)
        with pytest.raises(subprocess.TimeoutExpired):  # it does not exit: it keeps waiting
            proc.wait(timeout=2)
        line = next(x for x in log.read_text().splitlines() if "waiting for" in x)
        assert "hdfs" in line and (module == "ingest.archiver" or "cassandra" in line), line
    finally:
        proc.terminate()
        proc.wait(30)
