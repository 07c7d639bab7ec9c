"""Secrets files are owner-only from the first byte, whatever the umask or an earlier file's mode."""

from __future__ import annotations

import os
import stat

from definitions.files import write_private


def test_a_private_file_is_never_readable_by_others(tmp_path):
    path = tmp_path / "passwords.json"
    path.write_text("old")
    path.chmod(0o644)
    old_umask = os.umask(0)
    try:
        write_private(path, '{"admin": "secret"}')
    finally:
        os.umask(old_umask)
    assert path.read_text() == '{"admin": "secret"}'
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["passwords.json"], "no temporary file is left behind"
