"""A small WebHDFS client: what Python processes need of HDFS without starting a JVM.

Used for health probes, the archiver's completeness markers and `lambdactl status`.
"""

from __future__ import annotations

import httpx

from definitions.settings import Settings


class WebHdfsError(RuntimeError):
    pass


class WebHdfs:
    def __init__(self, settings: Settings, timeout_s: float = 10.0) -> None:
        self.base = settings.hdfs.webhdfs
        self.client = httpx.Client(timeout=timeout_s)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> WebHdfs:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _url(self, path: str, op: str, **params: str) -> str:
        if not path.startswith("/"):
            raise ValueError(f"WebHDFS paths are absolute: {path!r}")
        query = "&".join([f"op={op}", *(f"{k}={v}" for k, v in params.items())])
        return f"{self.base}{path}?{query}"

    def write(self, path: str, data: bytes, overwrite: bool = True) -> None:
        """Create a file (namenode redirect, then the datanode write)."""
        created = self.client.put(self._url(path, "CREATE", overwrite=str(overwrite).lower()))
        if created.status_code != 307:
            raise WebHdfsError(f"CREATE {path}: {created.status_code} {_remote_error(created)}")
        written = self.client.put(created.headers["location"], content=data)
        if written.status_code != 201:
            raise WebHdfsError(f"write {path}: {written.status_code} {_remote_error(written)}")

    def read(self, path: str) -> bytes | None:
        """A file's bytes, or None when it does not exist."""
        resp = self.client.get(self._url(path, "OPEN"), follow_redirects=True)
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise WebHdfsError(f"OPEN {path}: {resp.status_code} {_remote_error(resp)}")
        return resp.content

    def rename(self, source: str, destination: str) -> bool:
        resp = self.client.put(self._url(source, "RENAME", destination=destination))
        if resp.status_code != 200:
            raise WebHdfsError(f"RENAME {source}: {resp.status_code} {_remote_error(resp)}")
        return bool(resp.json().get("boolean"))

    def mkdirs(self, path: str) -> None:
        resp = self.client.put(self._url(path, "MKDIRS"))
        if resp.status_code != 200:
            raise WebHdfsError(f"MKDIRS {path}: {resp.status_code} {_remote_error(resp)}")

    def delete(self, path: str, recursive: bool = False) -> bool:
        resp = self.client.delete(self._url(path, "DELETE", recursive=str(recursive).lower()))
        if resp.status_code != 200:
            raise WebHdfsError(f"DELETE {path}: {resp.status_code} {_remote_error(resp)}")
        return bool(resp.json().get("boolean"))

    def list(self, path: str) -> list[str]:
        """Names in a directory; empty when it does not exist."""
        resp = self.client.get(self._url(path, "LISTSTATUS"))
        if resp.status_code == 404:
            return []
        if resp.status_code != 200:
            raise WebHdfsError(f"LISTSTATUS {path}: {resp.status_code} {_remote_error(resp)}")
        return sorted(s["pathSuffix"] for s in resp.json()["FileStatuses"]["FileStatus"])

    def status(self, path: str) -> dict:
        resp = self.client.get(self._url(path, "GETFILESTATUS"))
        if resp.status_code != 200:
            raise WebHdfsError(f"GETFILESTATUS {path}: {resp.status_code} {_remote_error(resp)}")
        return resp.json()["FileStatus"]


def _remote_error(resp: httpx.Response) -> str:
    try:
        return resp.json()["RemoteException"]["message"][:300]
    except (ValueError, KeyError, TypeError):
        return resp.text[:300]
