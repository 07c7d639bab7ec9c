"""On the real stack: a killed job brought back by `lambdactl up` from a plain shell (no LAMBDA_*
variable) runs with the persisted settings, and a contradicting explicit setting is refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from definitions.section import REPO_ROOT
from stores.progress import read_progress

LAMBDACTL = Path(sys.executable).parent / "lambdactl"


def plain_shell(settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAMBDA_")}
    if settings.state_dir != REPO_ROOT / ".lambda" / "state":  # a stack with its own state directory
        env["LAMBDA_STATE_DIR"] = str(settings.state_dir)
    env.update(extra)
    return env


def test_plain_up_restarts_a_killed_job_with_the_persisted_settings(settings, stack, tmp_path):
    job = stack.supervisor.process("speed-layer")
    assert job is not None
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)

    done = subprocess.run(
        [str(LAMBDACTL), "up"], env=plain_shell(settings), cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    restarted = stack.supervisor.process("speed-layer")
    assert restarted is not None and restarted.pid != job.pid
    assert read_progress(settings, "speed-layer").get("ingest_bucket_s") == settings.ingest_bucket_s
    environment = restarted.environ()
    assert "LAMBDA_INGEST_BUCKET_S" not in environment, "the job reads the persisted file, not the shell"
    assert environment["LAMBDA_STATE_DIR"] == str(settings.state_dir)


def test_a_contradicting_setting_is_refused_and_nothing_changes(settings, stack, tmp_path):
    other = "3600" if settings.ingest_bucket_s != 3600 else "60"
    before = {name: stack.supervisor.process(name).pid for name in ("archiver", "speed-layer")}
    done = subprocess.run(
        [str(LAMBDACTL), "up"],
        env=plain_shell(settings, LAMBDA_INGEST_BUCKET_S=other),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert (
        f"ingest_bucket_s is {settings.ingest_bucket_s} in the persisted settings, this command says {other}"
        in done.stderr
    )
    assert {name: stack.supervisor.process(name).pid for name in before} == before
