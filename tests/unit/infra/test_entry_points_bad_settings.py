"""Every process of the stack started on a settings file it cannot load (a hand edit, a value a
newer release refuses) ended in a traceback, again at each restart until the supervisor gave up:
the cause was at the bottom of a stack dump. Each now stops at once with one line naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from definitions.section import REPO_ROOT

ENTRY_POINTS = [
    ["-m", "ingest.archiver"],
    ["-m", "speed_layer.job"],
    ["-m", "api.server"],
    ["batch_layer/job.py"],
    ["-m", "infra.airflow", "scheduler"],
    ["-m", "reports"],
]


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=lambda e: e[-1])
def test_a_process_on_settings_it_cannot_load_stops_naming_why(entry, tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    settings_file = state / "settings.json"
    settings_file.write_text(json.dumps({"state_dir": str(state), "cassandra": {"keyspace": "Not A Keyspace"}}))
    settings_file.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAMBDA_")}
    env["LAMBDA_STATE_DIR"] = str(state)
    done = subprocess.run([sys.executable, *entry], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "settings cannot be loaded" in done.stderr and "keyspace" in done.stderr, done.stderr[-2000:]
