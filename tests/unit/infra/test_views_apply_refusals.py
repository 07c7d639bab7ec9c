"""`lambdactl views apply` refuses clearly, before changing anything it cannot finish: modules that
do not import, and a speed layer this stack does not run. No service is needed."""

from __future__ import annotations

import pytest

from definitions.settings import Settings
from infra.errors import StackError
from infra.stack import Stack
from lambdactl.cli import main
from tests.support.shell import plain_shell


def test_a_process_the_stack_does_not_supervise_cannot_be_restarted_and_the_error_says_which(tmp_path):
    settings = Settings(state_dir=tmp_path / "state", stack={"managed_services": ["kafka"]})
    with pytest.raises(StackError, match=r"speed-layer.*not a supervised process"):
        Stack(settings).restart("speed-layer")


def test_apply_of_a_module_that_does_not_import_exits_2_naming_it(tmp_path, monkeypatch, caplog):
    plain_shell(monkeypatch, tmp_path)
    monkeypatch.setenv("LAMBDA_ENVIRONMENT", "development")
    assert main(["views", "apply", "--modules", "no_such_views_module_xyz"]) == 2
    assert "no_such_views_module_xyz" in caplog.text
    persisted = tmp_path / "state" / "settings.json"
    assert not persisted.exists() or "no_such_views_module_xyz" not in persisted.read_text(), "nothing was written"


def test_apply_refuses_relative_view_paths(tmp_path, monkeypatch, caplog):
    plain_shell(monkeypatch, tmp_path)
    monkeypatch.setenv("LAMBDA_ENVIRONMENT", "development")
    assert main(["views", "apply", "--modules", "x", "--paths", "relative/dir"]) == 2
    assert "relative/dir" in caplog.text
