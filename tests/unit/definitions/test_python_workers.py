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
    import importlib, json, sys, zipimport
    sys.path.insert(0, sys.argv[1])
    install = sys.argv[2] == "install"
    import zipped.a.b.c, zipped.d
    reads = 0
    original = zipimport._read_directory
    def counting(archive):
        global reads
        reads += 1
        return original(archive)
    zipimport._read_directory = counting
    if install:
        from definitions.python_workers import skip_unchanged_zip_rereads
        skip_unchanged_zip_rereads()
        skip_unchanged_zip_rereads()  # twice: each task calls it
        importlib.invalidate_caches()  # the next task's: each importer reads once more, noting what
        reads = 0
    importlib.invalidate_caches()
    unchanged = reads
    reads = 0
    import zipfile
    with zipfile.ZipFile(sys.argv[1], "a") as z:
        z.writestr("zipped/added.py", "VALUE = 7\\n")
    importlib.invalidate_caches()
    changed = reads
    import zipped.added
    print(json.dumps({"unchanged": unchanged, "changed": changed, "added": zipped.added.VALUE}))
    """
)


def archive(tmp_path: Path) -> Path:
    path = tmp_path / "zipped.zip"
    with zipfile.ZipFile(path, "w") as z:
        for package in ("zipped", "zipped/a", "zipped/a/b", "zipped/a/b/c", "zipped/d"):
            z.writestr(f"{package}/__init__.py", "")
    return path


def probe(tmp_path: Path, mode: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(archive(tmp_path)), mode],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="invalidation is lazy from Python 3.12 on")
def test_without_it_every_invalidation_rereads_the_archive_once_per_package(tmp_path):
    assert probe(tmp_path, "plain")["unchanged"] >= 3  # the archive, zipped/, zipped/a/, zipped/a/b/


def test_an_unchanged_archive_is_not_read_again_and_a_changed_one_is(tmp_path):
    seen = probe(tmp_path, "install")
    assert seen["unchanged"] == 0
    assert seen["added"] == 7, "a module added to the archive after the first read is found"
    if sys.version_info < (3, 12):
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
