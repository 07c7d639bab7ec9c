"""Writing files the platform keeps in its state directory."""

from __future__ import annotations

import fcntl
import glob
import logging
import os
import stat
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path


def write_private(path: Path, text: str) -> Path:
    """Write `text` to `path` atomically, readable by the owner only from the first byte on (the
    file may hold secrets): a fresh temporary file created with mode 0600, then renamed over `path`
    (a name of its own per writer: writers at once each replace it whole)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return _replace(path, text, 0o600)


def _replace(path: Path, text: str, mode: int) -> Path:
    """Write `text` to a temporary file of this writer's own (created with `mode`, less the umask),
    on disk before it is renamed over `path`; a killed writer's temporary file goes later."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())  # on disk before the rename: a crash leaves the old text or the new
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _sync_dir(path.parent)
    _remove_stale_temporaries(path)
    return path


# Older than any write takes: a temporary file this old was left by a writer killed before its rename.
STALE_TEMPORARY_S = 600


def _remove_stale_temporaries(path: Path) -> None:
    """Remove the temporary copies of `path` that killed writers left (each holds what the file held:
    maybe secrets); a writer's copy in flight is younger and stays."""
    horizon = time.time() - STALE_TEMPORARY_S
    for left in path.parent.glob(f".{glob.escape(path.name)}.{'[0-9a-f]' * 12}.tmp"):
        try:
            if left.lstat().st_mtime < horizon:
                left.unlink()
        except OSError:
            pass  # removed by another writer meanwhile, or not a file this writer can remove: the write stands


def _sync_dir(folder: Path) -> None:
    """The rename itself on disk (the folder's entry), where the file system allows it."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def open_to_others(path: Path, ancestors: bool = False) -> str | None:
    """Why `path` (or its folder; with `ancestors`, any folder above it, whose owner could move it
    away and put another in its place) may not be trusted to name code the platform runs: another
    user's (but root's), or writable by every user (a sticky folder such as /tmp, above it, is not);
    None when it is the user's own. Group-writable is left to the group (umask 002: the user's own
    group)."""
    real_parent = path.resolve().parent  # a link's target: its folder decides who can replace it
    # Above it: the folders of the path as written too (whoever can change the one a link sits in
    # can point the link elsewhere), once each.
    above = list(dict.fromkeys([*path.absolute().parent.parents, *real_parent.parents])) if ancestors else []
    for item in (path, path.parent, *([real_parent] if real_parent != path.parent.resolve() else []), *above):
        mode = item.stat()
        if mode.st_uid not in (os.getuid(), 0):  # root's own (/etc, an image's files) is no stranger's
            return f"{item} belongs to another user (uid {mode.st_uid})"
        if (
            mode.st_uid != os.getuid()
            and mode.st_mode & stat.S_IWGRP
            and mode.st_gid not in {os.getgid(), *os.getgroups()}
        ):
            return f"{item} is root's and can be changed by a group this user is not in (gid {mode.st_gid})"
        if mode.st_mode & stat.S_IWOTH and not (item != path and mode.st_mode & stat.S_ISVTX):  # /tmp: sticky
            return f"{item} can be changed by every user (mode {stat.filemode(mode.st_mode)}); `chmod o-w {item}`"
    return None


def private_dir(folder: Path) -> Path:
    """`folder`, made if missing (0700), closed to other users if it was made before (its group keeps
    what it had); one owned by another user is left as it is."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = folder.stat()
    if mode.st_uid == os.geteuid() and mode.st_mode & 0o007:
        folder.chmod(stat.S_IMODE(mode.st_mode) & ~0o007)  # setgid and the group's bits kept
    return folder


def replace_text(path: Path, text: str) -> None:
    """Replace `path` in one step: a reader sees the old text or the new, never a part (a temporary
    name of its own per writer, so writers in several processes do not meet), also after a crash
    (on disk before the rename); what a killed writer left goes at a later write."""
    _replace(path, text, 0o666)


class LockHeld(Exception):
    """Another process (or thread) holds the lock and the caller would not wait."""

    def __init__(self, holder: str) -> None:
        super().__init__(f"held by pid {holder}")
        self.holder = holder


@contextmanager
def state_lock(
    state_dir: Path, name: str, doing: str, say: Callable[[str], None] = lambda _: None, wait: bool = True
) -> Iterator[bool]:
    """Hold `state_dir`/`name` (an flock: the kernel releases it when its holder dies, so no lock
    outlives a killed command; each holding opens the file, so threads of one process exclude each
    other too). A second holder waits, saying so, or raises LockHeld if it would not `wait`; yields
    whether it waited (what the first did may have changed what the second read before it)."""
    if state_dir.exists():  # before private_dir closes it: what others put there meanwhile stays
        refuse_untrusted_state_dir(state_dir)
    private_dir(state_dir)  # the settings in it are read by every process; the logs and Airflow's database
    refuse_untrusted_state_dir(state_dir)
    # Never through a link (O_NOFOLLOW): the lock's file is truncated and written.
    fd = os.open(state_dir / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "r+") as handle:
        waited = False
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()[:20] or "?"
            if not wait:
                raise LockHeld(holder) from None
            say(f"waiting for another {doing} on {state_dir} (pid {holder}) to finish")
            fcntl.flock(handle, fcntl.LOCK_EX)
            waited = True
        handle.seek(0)
        handle.truncate(0)
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield waited
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_alone(state_dir: Path, job: str, body: Callable[[], int]) -> int:
    """`body()` while holding `state_dir`/<job>.lock: a streaming job runs once per state folder (two
    collide in Spark's offset log, and the second's start undoes what the first just published).
    1, logged, when another instance holds it."""
    try:
        with state_lock(state_dir, f"{job}.lock", f"the {job}", wait=False):
            return body()
    except LockHeld as held:
        logging.getLogger("lambda.jobs").error(
            "another %s runs with state folder %s (pid %s): not started beside it", job, state_dir, held.holder
        )
        return 1


def refuse_untrusted(path: Path, setting: str, consequence: str, ancestors: bool = False) -> None:
    """ValueError naming `setting` unless `path` (a folder it names, with every folder above it:
    `ancestors`; or a file in one) passes open_to_others: every process of the platform runs the code
    found there."""
    problem = open_to_others(path, ancestors)
    if problem:
        raise ValueError(f"{setting}: {problem}: {consequence}")


class UntrustedStateDir(ValueError):
    """The state directory, or a folder above it, is another user's or open to others."""


def refuse_untrusted_state_dir(state_dir: Path) -> None:
    """UntrustedStateDir naming `state_dir` unless it and every folder above it pass open_to_others:
    another user who made it first (or can replace it) could plant what the stack runs (a class on a
    store's classpath) or link a lock file to the operator's own files. Checked before anything in
    it is read or written."""
    problem = open_to_others(state_dir, ancestors=True)
    if problem:
        raise UntrustedStateDir(
            f"state_dir {state_dir}: {problem}: nothing in it is read, written or started. Use a folder only "
            "this user (or root) can change (LAMBDA_STATE_DIR), or fix its owner and mode"
        )


def refuse_untrusted_module(name: str, folders: Iterable[Path], setting: str) -> None:
    """refuse_untrusted for every file Python may import module `name` from (each package on the way
    to it too: its folder and all it holds, `__pycache__` included; a single module's file and its
    cached bytecode), when it is found in one of `folders` — looked up without importing anything,
    a link judged by where it points too. One found elsewhere (the virtualenv's packages) is left."""
    import importlib.util
    from importlib.machinery import PathFinder

    parts = name.split(".")
    search: list[str] | None = [str(folder) for folder in folders]
    for depth in range(1, len(parts) + 1):
        if not search:
            return  # no package to look in: the import that follows names what is wrong
        try:
            spec = PathFinder.find_spec(".".join(parts[:depth]), search)
        except (ImportError, ValueError, OSError):
            return
        if spec is None:
            return  # not in these folders (at the top: an installed package)
        files: list[Path] = []
        if spec.origin and spec.has_location:
            origin = Path(spec.origin)
            files.append(origin)
            if origin.suffix == ".py":
                cached = Path(importlib.util.cache_from_source(str(origin)))
                files += [p for p in (cached.parent, cached) if p.exists()]
        for location in spec.submodule_search_locations or ():  # a package: everything it holds
            files += [Path(location), *sorted(Path(location).rglob("*"))]
        for file in files:
            refuse_untrusted(file, setting, f"module {name} is not imported")
        search = list(spec.submodule_search_locations or ())


def start_ticks(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (/proc/<pid>/stat), or None where there
    is no such file. Unlike its wall-clock start time (psutil's create_time: the boot time, read from
    the wall clock, plus these ticks) it stays put when the clock is stepped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
        return int(data[data.rindex(b")") + 2 :].split()[19])  # field 22; a name may hold ") "
    except (OSError, ValueError, IndexError):
        return None


def boot_id() -> str | None:
    """This boot of the machine (/proc/sys/kernel/random/boot_id), or None where there is none:
    start_ticks name a process only within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def same_process(pid: int, ticks: int, boot: str) -> bool | None:
    """Whether process `pid` is the one that started `ticks` clock ticks after boot `boot` (and still
    runs, or is a zombie); None where this machine has no boot id to tell by."""
    here = boot_id()
    if here is None:
        return None
    return boot == here and start_ticks(pid) == ticks
