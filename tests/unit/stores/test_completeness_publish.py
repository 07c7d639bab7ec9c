"""Publishing a completeness marker leaves no temporary file of a killed publisher behind (no
service: HDFS is a dict)."""

from __future__ import annotations

from definitions.settings import Settings
from stores import completeness


class Fs:
    files: dict[str, bytes] = {}

    def __init__(self, settings) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def mkdirs(self, path) -> None:
        return None

    def write(self, path, data, overwrite=True) -> None:
        self.files[path] = data

    def delete(self, path, recursive=False) -> bool:
        return self.files.pop(path, None) is not None

    def rename(self, source, destination) -> bool:
        self.files[destination] = self.files.pop(source)
        return True

    def list(self, path) -> list[str]:
        return sorted(p.rsplit("/", 1)[1] for p in self.files if p.rsplit("/", 1)[0] == path)


def test_a_killed_publishers_temporary_file_goes_with_the_next_marker(monkeypatch):
    settings = Settings()
    root = settings.archiver.completeness_path
    Fs.files = {f"{root}/_tmp-000000000007.json": b'{"batch_id": 7', f"{root}/notes.txt": b"x"}
    monkeypatch.setattr(completeness, "WebHdfs", Fs)
    completeness.publish(settings, completeness.Completeness(batch_id=8, written_ms=1))
    assert sorted(Fs.files) == [f"{root}/000000000008.json", f"{root}/notes.txt"]
