"""The executors' Python workers skip re-reading zip archives that have not changed.

PySpark's worker calls importlib.invalidate_caches() before every task; on Python 3.10 and 3.11 that
re-reads the directory of every zip archive an import went through, once per package imported from
it (pyspark.zip: ~150 ms a task). Each case runs in a fresh interpreter, so this test process's own
import machinery is never changed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

PROBE = textwrap.dedent(
    """
    import importlib, json, os, sys, zipimport
    path, mode, change = sys.argv[1], sys.argv[2], sys.argv[3]
    sys.path.insert(0, path)
    import zipped.a.b.c, zipped.d
    reads = 0
    original = zipimport._read_directory
    def counting(archive):
        global reads
        reads += 1
        return original(archive)
    zipimport._read_directory = counting
    if mode == "install":
        from definitions.python_workers import skip_unchanged_zip_rereads
        skip_unchanged_zip_rereads()
        skip_unchanged_zip_rereads()  # twice: each task calls it
        importlib.invalidate_caches()  # the next task's: each importer reads once more, noting what
        reads = 0
    importlib.invalidate_caches()
    unchanged = reads
    reads = 0
    before = os.stat(path)
    with open(sys.argv[4], "rb") as f:
        replacement = f.read()
    if change == "append":  # size and time change
        import zipfile
        with zipfile.ZipFile(path, "a") as z:
            z.writestr("zipped/added.py", "VALUE = 7\\n")
    elif change == "in_place":  # the same size, rewritten in place, its time put back (rsync -t --inplace)
        with open(path, "r+b") as f:
            f.write(replacement)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    else:  # deleted and made again with the old time: the file system may give it the same inode
        os.remove(path)
        with open(path, "wb") as f:
            f.write(replacement)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    importlib.invalidate_caches()
    changed = reads
    import zipped.added
    print(json.dumps({"unchanged": unchanged, "changed": changed, "added": zipped.added.VALUE}))
    """
)

PACKAGES = ("zipped", "zipped/a", "zipped/a/b", "zipped/a/b/c", "zipped/d")


def archive(path: Path, module: str) -> Path:
    """An archive of nested packages and one module, `module`, of 20 bytes."""
    with zipfile.ZipFile(path, "w") as z:
        for package in PACKAGES:
            z.writestr(zipfile.ZipInfo(f"{package}/__init__.py", (2020, 1, 1, 0, 0, 0)), "")
        z.writestr(zipfile.ZipInfo(f"zipped/{module}.py", (2020, 1, 1, 0, 0, 0)), "VALUE = 7  # 20 byte\n")
    return path


def probe(tmp_path: Path, mode: str, change: str = "append") -> dict:
    first = archive(tmp_path / "zipped.zip", "other")
    second = archive(tmp_path / "replacement.zip", "added")
    assert first.stat().st_size == second.stat().st_size and first.read_bytes() != second.read_bytes()
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(first), mode, change, str(second)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="invalidation is lazy from Python 3.13 on")
def test_without_it_every_invalidation_rereads_the_archive_once_per_package(tmp_path):
    assert probe(tmp_path, "plain")["unchanged"] >= 3  # the archive, zipped/, zipped/a/, zipped/a/b/


@pytest.mark.parametrize("change", ["append", "in_place", "recreated"])
def test_an_unchanged_archive_is_not_read_again_and_a_changed_one_is(tmp_path, change):
    """Whatever the change: more entries, the same size rewritten in place with its time put back,
    or the file made again (perhaps on its old inode) with its old time."""
    seen = probe(tmp_path, "install", change)
    assert seen["unchanged"] == 0
    assert seen["added"] == 7, "a module in the archive after the change is found"
    assert seen["changed"] >= 1


def test_the_executor_side_functions_install_it(tmp_path):
    """The speed layer's and the replay's partition writer and the batch layer's HBase writer run it
    first thing in the worker."""
    script = textwrap.dedent(
        """
        import sys, zipimport
        from definitions.settings import Settings
        from speed_layer.job import partition_writer
        from stores import batch_writer
        from definitions.store_connections import HBaseSettings
        before = zipimport.zipimporter.invalidate_caches
        list(partition_writer(Settings(), {}, 1)(iter([])))
        speed = zipimport.zipimporter.invalidate_caches is not before
        zipimport.zipimporter.invalidate_caches = before
        nowhere = Settings().model_copy(update={"hbase": HBaseSettings(thrift_port=1)})
        try:
            batch_writer._write_partition(nowhere, "t", None, "minute", iter([]))
        except Exception:
            pass  # nothing listens there
        print(speed, zipimport.zipimporter.invalidate_caches is not before)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True True"
