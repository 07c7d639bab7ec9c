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


def test_a_broken_pipe_of_the_command_itself_is_a_failure(tmp_path, monkeypatch, caplog):
    """Only a closed standard output ends quietly: a socket or pipe of the command's own that
    breaks is a failure (status 1), as any other."""
    import argparse

    from lambdactl import cli

    plain_shell(monkeypatch, tmp_path)

    def breaks(settings, args):
        raise BrokenPipeError(32, "Broken pipe")

    parser = cli.build_parser()
    real_parse = parser.parse_args
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    monkeypatch.setattr(
        parser, "parse_args", lambda argv=None: argparse.Namespace(**{**vars(real_parse(["status"])), "func": breaks})
    )
    assert cli.main(["status"]) == 1
    assert "status failed: BrokenPipeError" in caplog.text
