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


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary_one(tmp_path):
    import pytest

    path = tmp_path / "settings.json"
    write_private(path, "old")
    with pytest.raises(UnicodeEncodeError):
        write_private(path, "new \ud800")  # not encodable: fails half-way through the write
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]


def test_a_temporary_file_a_killed_writer_left_is_removed_by_the_next_write(tmp_path):
    """A writer killed between creating its temporary file and the rename leaves a copy of the
    secrets beside the file; the next write removes such copies once they are older than any write
    can take, and leaves a writer's copy in flight alone."""
    path = tmp_path / "settings.json"
    stale = tmp_path / ".settings.json.0123456789ab.tmp"
    stale.write_text('{"token": "old secret"}')
    os.utime(stale, (1_000_000, 1_000_000))
    in_flight = tmp_path / ".settings.json.ba9876543210.tmp"
    in_flight.write_text("being written")
    other = tmp_path / ".passwords.json.0123456789ab.tmp"
    other.write_text("another file's")
    os.utime(other, (1_000_000, 1_000_000))
    odd = tmp_path / ".settings.json.cccccccccccc.tmp"
    odd.mkdir()  # matches the name, cannot be unlinked: the write still succeeds
    os.utime(odd, (1_000_000, 1_000_000))
    write_private(path, "new")
    assert path.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, in_flight.name, other.name, odd.name])


def _syncs_and_renames(monkeypatch) -> list[str]:
    """What is done to the disk from now on, in order: "fsync", "replace"."""
    done: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: done.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(os, "replace", lambda a, b: done.append("replace") or real_replace(a, b))
    return done


def test_the_new_text_is_on_disk_before_it_replaces_the_old(tmp_path, monkeypatch):
    """A crash after the rename must not leave an empty file: the text is synced first, then the folder."""
    path = tmp_path / "settings.json"
    done = _syncs_and_renames(monkeypatch)
    write_private(path, "new")
    assert done == ["fsync", "replace", "fsync"]


def test_a_replaced_file_is_on_disk_before_the_rename_and_what_killed_writers_left_goes(tmp_path, monkeypatch):
    """supervisord.conf and the like: not synced, a crash could leave an empty file; a writer killed
    before its rename left its temporary file for good."""
    from definitions.files import replace_text

    path = tmp_path / "supervisord.conf"
    left = tmp_path / f".{path.name}.{'0' * 12}.tmp"
    left.write_text("a killed writer's")
    os.utime(left, (1_000_000, 1_000_000))
    done = _syncs_and_renames(monkeypatch)
    replace_text(path, "[supervisord]\n")
    assert done == ["fsync", "replace", "fsync"]
    assert path.read_text() == "[supervisord]\n" and not left.exists()
    assert path.stat().st_mode & 0o777 == 0o666 & ~_umask(), "not a private file: the umask decides"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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


def test_a_state_directory_made_before_is_closed_to_other_users(tmp_path):
    """`mkdir(mode=0o700, exist_ok=True)` leaves an existing directory as it was: a state directory
    made 0755 left Airflow's database (run confs, XComs) and every log readable by every local user.
    Its group keeps what it had (a shared group is a choice)."""
    from definitions.files import private_dir

    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o2775)  # setgid: files made in it take its group
    assert private_dir(state) == state
    assert state.stat().st_mode & 0o7777 == 0o2770
    fresh = private_dir(tmp_path / "a" / "b")
    assert fresh.is_dir() and fresh.stat().st_mode & 0o007 == 0
