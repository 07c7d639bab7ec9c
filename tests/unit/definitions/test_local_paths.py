"""The state and jars folders spelled two ways are one folder to every command: the stack tags each
process it starts with the state folder's path and a `down` finds what a dead supervisor left by
that tag, compared as text; a `..` or a symbolic link in one command's spelling and not in the
other's left the stack's processes running, unseen."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from definitions.settings import Settings


def loaded(**given) -> Settings:
    return Settings(_env_file=None, **given)


def test_dot_dot_and_dot_segments_are_resolved(tmp_path: Path):
    (tmp_path / "elsewhere").mkdir()
    plain = loaded(state_dir=tmp_path / "state", jars_dir=tmp_path / "jars")
    roundabout = loaded(state_dir=f"{tmp_path}/elsewhere/../state/.", jars_dir=f"{tmp_path}/./x/../jars")
    assert (roundabout.state_dir, roundabout.jars_dir) == (plain.state_dir, plain.jars_dir)
    assert str(roundabout.state_dir) == str(tmp_path.resolve() / "state")


def test_a_symbolic_link_names_the_folder_it_points_to(tmp_path: Path):
    real = tmp_path / "real-state"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert loaded(state_dir=tmp_path / "link").state_dir == loaded(state_dir=real).state_dir == real.resolve()


def test_a_relative_folder_is_taken_from_where_the_command_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    os.mkdir("here")
    assert loaded(state_dir="here/../state").state_dir == tmp_path.resolve() / "state"
