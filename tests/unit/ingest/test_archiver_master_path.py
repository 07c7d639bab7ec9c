"""The archiver refuses a checkpoint with committed batches whose master dataset holds none (no
service: HDFS is a dict). `archiver.master_path` changed with the checkpoint kept (or the dataset
removed alone): the checkpoint resumed at its offsets and wrote only new records to the new path,
and the next batch run read the new path alone, dropping every record archived before."""

from __future__ import annotations

import pytest

from definitions.settings import Settings
from ingest import archiver
from stores import completeness
from tests.support.dict_hdfs import DictHdfs

CHECKPOINT = "/lambda/checkpoints/archiver/master"


def test_a_checkpoint_with_commits_and_a_master_without_its_log_is_refused(monkeypatch, caplog):
    settings = Settings()
    files = {f"{CHECKPOINT}/offsets/{n}": b"{}" for n in range(3)} | {
        f"{CHECKPOINT}/commits/{n}": b"{}" for n in range(3)
    }
    monkeypatch.setattr(archiver, "WebHdfs", DictHdfs.over(files))
    with pytest.raises(SystemExit):
        archiver.check_checkpoint_kept(settings)
    assert "holds no batch" in caplog.text and settings.archiver.master_path in caplog.text


def test_a_first_batch_planned_and_not_committed_is_no_refusal(monkeypatch):
    """Killed before its first commit: the sink log is empty, and rightly so."""
    settings = Settings()
    monkeypatch.setattr(archiver, "WebHdfs", DictHdfs.over({f"{CHECKPOINT}/offsets/0": b"{}"}))
    assert archiver.check_checkpoint_kept(settings) is None, "the master holds no batch: no marker is its"


def test_markers_are_kept_only_up_to_the_last_batch_the_master_holds(monkeypatch):
    """Killed after planning batch 5 and before writing it: a marker 5 is of an earlier archive (a
    marker is published only after its batch is in the master), and would say complete up to a time
    this archive has not reached."""
    settings = Settings()
    files = {f"{CHECKPOINT}/offsets/{n}": b"{}" for n in range(6)}
    files |= {f"{CHECKPOINT}/commits/{n}": b"{}" for n in range(5)}
    files |= {f"{settings.archiver.master_path}/_spark_metadata/{n}": b"v1" for n in range(5)}
    files |= {f"{settings.archiver.completeness_path}/{n:012d}.json": b"{}" for n in range(3, 6)}
    monkeypatch.setattr(archiver, "WebHdfs", DictHdfs.over(files))
    monkeypatch.setattr(completeness, "WebHdfs", DictHdfs.over(files))
    kept = archiver.check_checkpoint_kept(settings)
    assert kept == 4
    assert completeness.drop_beyond(settings, kept) == ["000000000005.json"]
