"""Writing files the platform keeps in its state directory."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path


def write_private(path: Path, text: str) -> Path:
    """Write `text` to `path` atomically, readable by the owner only from the first byte on (the
    file may hold secrets): a fresh temporary file created with mode 0600, then renamed over `path`
    (a name of its own per writer: writers at once each replace it whole)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)
    return path


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
    name of its own per writer, so writers in several processes do not meet)."""
    part = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    part.write_text(text)
    os.replace(part, path)
