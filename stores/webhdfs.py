"""HDFS over WebHDFS, for Python processes that should not start a JVM: health probes, the
archiver's completeness markers, the speed layer's checkpoint marker, `lambdactl status`.

A thin adapter over the maintained `hdfs` package (HdfsCLI): absolute paths only, a missing file
reads as None and a missing directory lists as empty, every other failure is a WebHdfsError naming
the operation and the path (never a traceback of the library's).
"""

from __future__ import annotations

import builtins
from typing import Any

import requests
from hdfs import HdfsError, InsecureClient

from definitions.settings import Settings


class WebHdfsError(RuntimeError):
    pass


def _missing(exc: HdfsError) -> bool:
    return getattr(exc, "exception", None) == "FileNotFoundException"


class WebHdfs:
    def __init__(self, settings: Settings, timeout_s: float = 10.0) -> None:
        h = settings.hdfs
        self.session = requests.Session()
        # Several URLs (an HA pair's namenodes): the client tries them in turn.
        self.client = InsecureClient(
            ";".join(h.webhdfs_endpoints), user=h.user or None, timeout=timeout_s, session=self.session
        )

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> WebHdfs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, op: str, path: str, fn, *args: Any, **kwargs: Any):
        if not path.startswith("/"):
            raise ValueError(f"WebHDFS paths are absolute: {path!r}")
        try:
            return fn(path, *args, **kwargs)
        except HdfsError as exc:
            raise WebHdfsError(f"{op} {path}: {str(exc)[:300]}") from exc
        except requests.RequestException as exc:
            raise WebHdfsError(f"{op} {path}: {type(exc).__name__}") from exc

    def write(self, path: str, data: bytes, overwrite: bool = True) -> None:
        """Create a file (namenode redirect, then the datanode write)."""
        self._call("CREATE", path, self.client.write, data=data, overwrite=overwrite)

    def append(self, path: str, data: bytes) -> None:
        """Append to an existing file (an error when it is gone: never created here)."""
        self._call("APPEND", path, self.client.write, data=data, append=True)

    def read(self, path: str, max_bytes: int | None = None) -> bytes | None:
        """A file's bytes (at most `max_bytes` + 1 of them, so a caller tells a longer file), or None
        when it does not exist."""

        def read(p: str) -> bytes | None:
            try:
                length = None if max_bytes is None else max_bytes + 1
                with self.client.read(p, length=length) as reader:
                    return reader.read()
            except HdfsError as exc:
                if _missing(exc):
                    return None
                raise

        return self._call("OPEN", path, read)

    def read_tail(self, path: str, length: int, size: int) -> bytes:
        """The last `length` bytes of a file of `size` bytes (its listing's)."""

        def read(p: str) -> bytes:
            with self.client.read(p, offset=max(size - length, 0), length=length) as reader:
                return reader.read()

        return self._call("OPEN", path, read)

    def rename(self, source: str, destination: str) -> bool:
        """Move a file; False when HDFS refuses (the destination exists, its parent is missing)."""

        def rename(p: str) -> bool:
            try:
                self.client.rename(p, destination)
                return True
            except HdfsError as exc:
                if str(exc).startswith("Unable to rename"):
                    return False
                raise

        return self._call("RENAME", source, rename)

    def replace(self, source: str, destination: str) -> None:
        """Move a file over another in one step (HDFS's rename with OVERWRITE): a reader sees the old
        file or the new one, never none. HdfsCLI's rename has no options; its request takes them."""

        def replace(p: str) -> None:
            self.client._rename(p, destination=self.client.resolve(destination), renameoptions="OVERWRITE")

        self._call("RENAME", source, replace)

    def write_whole(self, path: str, data: bytes) -> None:
        """Write a file beside `path`, then move it over `path` in one step: HDFS shows a file being
        created as empty until it is closed, so a writer killed half-way would leave an empty file."""
        self.write(f"{path}.tmp", data)
        self.replace(f"{path}.tmp", path)

    def mkdirs(self, path: str) -> None:
        self._call("MKDIRS", path, self.client.makedirs)

    def delete(self, path: str, recursive: bool = False) -> bool:
        """True when something was deleted, False when nothing was there."""
        return bool(self._call("DELETE", path, self.client.delete, recursive=recursive))

    def delete_if_empty(self, path: str) -> bool:
        """Delete a directory only if it holds nothing, in one call (a listing first would race with
        a writer creating something in it): True when deleted, False when it held something or was
        not there."""

        def delete(p: str) -> bool:
            try:
                return bool(self.client.delete(p, recursive=False))
            except HdfsError as exc:
                if getattr(exc, "exception", None) == "PathIsNotEmptyDirectoryException":
                    return False
                raise

        return self._call("DELETE", path, delete)

    def list(self, path: str) -> list[str]:
        """Names in a directory; empty when it does not exist."""

        def names(p: str) -> list[str]:
            try:
                return sorted(self.client.list(p))
            except HdfsError as exc:
                if _missing(exc):
                    return []
                raise

        return self._call("LISTSTATUS", path, names)

    def entries(self, path: str) -> builtins.list[tuple[str, str, int]]:
        """(name, type: FILE or DIRECTORY, length in bytes) of each entry of a directory, from one
        listing; empty when it does not exist."""

        def entries(p: str) -> builtins.list[tuple[str, str, int]]:
            try:
                return sorted(
                    (name, str(st.get("type")), int(st.get("length") or 0))
                    for name, st in self.client.list(p, status=True)
                )
            except HdfsError as exc:
                if _missing(exc):
                    return []
                raise

        return self._call("LISTSTATUS", path, entries)

    def versions(self, path: str) -> builtins.list[tuple[str, int, int]]:
        """(name, modification time in ms, length in bytes) of each file of a directory, from one
        listing: a file rewritten under its name is told apart; empty when it does not exist."""

        def versions(p: str) -> builtins.list[tuple[str, int, int]]:
            try:
                return sorted(
                    (name, int(st.get("modificationTime") or 0), int(st.get("length") or 0))
                    for name, st in self.client.list(p, status=True)
                    if st.get("type") == "FILE"
                )
            except HdfsError as exc:
                if _missing(exc):
                    return []
                raise

        return self._call("LISTSTATUS", path, versions)

    def status(self, path: str) -> dict:
        return self._call("GETFILESTATUS", path, self.client.status)
