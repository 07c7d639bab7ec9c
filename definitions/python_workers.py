"""What the platform's functions do first in an executor's Python worker.

PySpark's worker calls `importlib.invalidate_caches()` before every task. Before Python 3.13 that
re-reads, in Python, the directory of every zip archive an import went through, once for each
package imported from it (CPython gh-103200, made lazy in 3.13): the workers import pyspark from
pyspark.zip, so every task spent ~150 ms of CPU there (more on a loaded machine), whatever its
data: a job of two empty Python tasks took 524 ms, 193 ms without (bench/python_task_overhead.py).
Workers are reused from task to task, so the
first call in a worker makes later invalidations skip an archive whose file has not changed since
that importer last read it (each reads it once more at the next task, noting what it read); one
that changed is read again, as before. A worker forked afterwards (an idle one is ended after a
minute) pays for its first two tasks again."""

from __future__ import annotations

import os
import sys
import zipimport


def _identity(path: str) -> tuple[int, ...] | None:
    """What changes with the file: its inode-change time too, which no writer sets back (a rewrite
    in place of the same size with its modification time restored, or a file made again on a
    reused inode, keep the other four)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def skip_unchanged_zip_rereads() -> None:
    """Install, once per process, an invalidation that reads an archive again only when its file
    changed (`_identity`) since that importer last read it. Idempotent and cheap: each task calls it."""
    current = zipimport.zipimporter.invalidate_caches
    if sys.version_info >= (3, 13) or getattr(current, "skips_unchanged", False):
        return  # from 3.13 an invalidation reads nothing
    reread = current

    def invalidate_caches(self: zipimport.zipimporter) -> None:
        seen = _identity(self.archive)  # taken before the read: a change during it shows next time
        if seen is not None and getattr(self, "_read_as", None) == seen:
            return
        reread(self)  # each importer of a package in the archive holds its own copy of the directory
        self._read_as = seen  # type: ignore[attr-defined]

    invalidate_caches.skips_unchanged = True  # type: ignore[attr-defined]
    zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign]
