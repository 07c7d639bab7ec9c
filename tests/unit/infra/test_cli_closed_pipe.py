"""`lambdactl … | head`: a reader that stops early closed the pipe, and the command said it failed,
`(is the stack up?)`, and exited 1. It now ends quietly, as Unix tools do (status 141: SIGPIPE)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.shell import plain_shell


def test_output_to_a_closed_pipe_ends_quietly(tmp_path, monkeypatch):
    plain_shell(monkeypatch, tmp_path)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    done = subprocess.run(
        [sys.executable, "-m", "lambdactl.cli", "config"],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        env={**os.environ, "LAMBDA_STATE_DIR": str(tmp_path / "state")},
    )
    os.close(write)
    assert "failed" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 141
