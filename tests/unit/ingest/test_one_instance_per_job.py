"""A streaming job runs once per state folder: a second archiver or speed layer started beside the
running one (by hand, `python -m ingest.archiver`) collided with it in Spark's offset log, wrote
master files no log names, dead-lettered bad records twice, and, at its start, dropped the
completeness marker the running one had just published. It now exits 1 before it touches anything,
naming the one that runs."""

from __future__ import annotations

import logging
import os

import pytest

from definitions.files import state_lock
from definitions.settings import Settings
from ingest import archiver
from speed_layer import job as speed_job


@pytest.mark.parametrize(("module", "name"), [(archiver, "archiver"), (speed_job, "speed-layer")])
def test_a_second_instance_of_a_job_exits_before_it_runs(tmp_path, monkeypatch, caplog, module, name):
    settings = Settings(state_dir=tmp_path)
    ran: list[Settings] = []
    monkeypatch.setattr(module, "process_settings", lambda _job: settings)
    monkeypatch.setattr(module, "configure_from", lambda *_: None)
    monkeypatch.setattr(module, "run", lambda s: ran.append(s) or 0)
    with state_lock(tmp_path, f"{name}.lock", f"the {name}"), caplog.at_level(logging.ERROR):
        assert module.main() == 1
    assert ran == []
    assert f"another {name} runs with state folder {tmp_path} (pid {os.getpid()})" in caplog.text

    assert module.main() == 0  # alone, it runs
    assert ran == [settings]
