"""Publishing a completeness marker leaves no temporary file of a killed publisher behind (no
service: HDFS is a dict)."""

from __future__ import annotations

from definitions.settings import Settings
from stores import completeness
from tests.support.dict_hdfs import DictHdfs


def test_a_killed_publishers_temporary_file_goes_with_the_next_marker(monkeypatch):
    settings = Settings()
    root = settings.archiver.completeness_path
    files = {f"{root}/_tmp-000000000007.json": b'{"batch_id": 7', f"{root}/notes.txt": b"x"}
    monkeypatch.setattr(completeness, "WebHdfs", DictHdfs.over(files))
    completeness.publish(settings, completeness.Completeness(batch_id=8, written_ms=1))
    assert sorted(files) == [f"{root}/000000000008.json", f"{root}/notes.txt"]


def test_a_checkpoint_reset_deletes_the_temporary_files_of_batches_beyond_it(monkeypatch):
    settings = Settings()
    root = settings.archiver.completeness_path
    files = {
        f"{root}/000000000009.json": b"{}",
        f"{root}/_tmp-000000000010.json": b"{",
        f"{root}/000000000003.json": b"{}",
    }
    monkeypatch.setattr(completeness, "WebHdfs", DictHdfs.over(files))
    assert completeness.drop_beyond(settings, planned=5) == ["000000000009.json"]
    assert sorted(files) == [f"{root}/000000000003.json"]
