"""A stand-in for stores.webhdfs.WebHdfs over a dict of path -> bytes, for tests of what a store
module writes and reads (no service). `DictHdfs.over(files)` gives a class to monkeypatch in."""

from __future__ import annotations


class DictHdfs:
    files: dict[str, bytes] = {}

    def __init__(self, settings=None) -> None:
        pass

    @classmethod
    def over(cls, files: dict[str, bytes]) -> type[DictHdfs]:
        return type("DictHdfsOver", (cls,), {"files": files})

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def mkdirs(self, path) -> None:
        return None

    def read(self, path, max_bytes=None):
        return self.files.get(path)

    def write(self, path, data, overwrite=True) -> None:
        self.files[path] = data

    def write_whole(self, path, data) -> None:
        self.files[path] = data

    def delete(self, path, recursive=False) -> bool:
        return self.files.pop(path, None) is not None

    def rename(self, source, destination) -> bool:
        if destination in self.files:
            return False
        self.files[destination] = self.files.pop(source)
        return True

    def list(self, path) -> list[str]:
        return sorted(p.rsplit("/", 1)[1] for p in self.files if p.rsplit("/", 1)[0] == path)
