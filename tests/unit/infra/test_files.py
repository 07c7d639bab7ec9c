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


def test_writers_of_one_private_file_at_once_each_replace_it_whole(tmp_path):
    """Two `lambdactl up` at once persist the settings together: with one temporary name, one
    writer unlinked the other's file and that one failed with FileNotFoundError."""
    from concurrent.futures import ThreadPoolExecutor

    from definitions.files import write_private

    target = tmp_path / "settings.json"
    texts = [str(n) * 100_000 for n in range(10)]
    with ThreadPoolExecutor(10) as pool:
        list(pool.map(lambda text: [write_private(target, text) for _ in range(20)], texts))
    assert target.read_text() in texts
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]
