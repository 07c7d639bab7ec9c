"""The layers build their store adapters through stores.registry, so the adapter the settings name
is the one that serves queries, takes the speed layer's writes and holds the batch versions (no
services: the adapters here are the recording ones of sample_adapters)."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest

from definitions.settings import Settings
from definitions.store_settings import StoresSettings
from tests.support.shell import plain_shell
from tests.unit.stores import sample_adapters
from tests.unit.stores.sample_adapters import (
    EmptyVersions,
    RecordingBatchViews,
    RecordingRealtimeReader,
    RecordingRealtimeWriter,
)

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = "tests.unit.stores.sample_adapters"


@pytest.fixture(autouse=True)
def _plain_shell(monkeypatch, tmp_path):
    plain_shell(monkeypatch, tmp_path)
    sample_adapters.CREATED.clear()


@pytest.fixture
def recording() -> Settings:
    return Settings(
        stores=StoresSettings(
            batch_views=f"{SAMPLES}.RecordingBatchViews",
            realtime_reader=f"{SAMPLES}.RecordingRealtimeReader",
            realtime_writer=f"{SAMPLES}.RecordingRealtimeWriter",
            versions=f"{SAMPLES}.EmptyVersions",
        )
    )


def made(cls: type) -> list:
    return [a for a in sample_adapters.CREATED if type(a) is cls]


def test_the_serving_layer_reads_through_the_chosen_adapters(recording):
    from serving_layer.service import ServingLayer

    serving = ServingLayer(recording)
    batch = serving.batch.reader
    assert isinstance(batch, RecordingBatchViews)
    assert batch.args == (recording.api.hbase_pool_size, recording.api.hbase_pool_wait_s)
    serving.speed.known(None)  # no speed layer has started: HDFS is not asked
    answer = serving.series(serving.views["page_views"], {"url": "/a"}, 0, 7_200, "hour")
    [reader] = made(RecordingRealtimeReader)
    assert reader.kwargs == {"timeout_s": 5}
    assert batch.calls == [("pointer_columns", ())], "no batch table serves yet: only the pointer is read"
    assert reader.calls == [("series", ("page_views", "hour", '["/a"]', [0, 3_600], 0))]
    assert answer.provenance.version is None and answer.series is not None
    assert serving.realtime.reader() is reader, "the realtime reader is reused across queries"
    serving.close()
    assert reader.closed


def test_the_speed_layers_executors_keep_one_writer_of_the_chosen_adapter_per_process(recording):
    """Each executor process builds the chosen writer once and reuses it from task to task
    (tests/unit/speed shows the writes happen there, through Spark)."""
    from stores.registry import process_realtime_writer

    first = process_realtime_writer(recording)
    assert process_realtime_writer(recording) is first
    assert process_realtime_writer(recording.model_copy(deep=True)) is first, "equal settings share the writer"
    other = process_realtime_writer(recording.model_copy(update={"ingest_bucket_s": recording.ingest_bucket_s + 60}))
    assert other is not first
    assert made(RecordingRealtimeWriter) == [first, other]
    assert first.settings is recording


def test_the_batch_layer_reads_runs_from_the_chosen_version_store(recording):
    from batch_layer.job import swap_version, verify_version
    from stores.batch_writer import VerificationError

    with pytest.raises(VerificationError, match="version 7 was not written"):
        verify_version(recording, 7)
    with pytest.raises(VerificationError, match="version 7 cannot serve"):
        swap_version(recording, 7)
    assert [a.calls for a in made(EmptyVersions)] == [[("runs", ())], [("runs", ())]]


def test_reports_find_the_window_in_the_chosen_version_store(recording):
    from reports.build import NoWindow, window_for_version

    with pytest.raises(NoWindow, match="no batch version serves yet"):
        window_for_version(recording)
    [versions] = made(EmptyVersions)
    assert versions.calls == [("pointer", ())]


def test_lambdactl_clean_realtime_asks_the_chosen_version_store(recording, caplog):
    from lambdactl.batch import cmd_clean_realtime

    caplog.set_level("INFO", logger="lambdactl")
    assert cmd_clean_realtime(recording, argparse.Namespace(json=False)) == 0
    assert "no batch version serves yet" in caplog.text
    [versions] = made(EmptyVersions)
    assert versions.calls == [("pointer", ())]


# Adapter classes the registry builds: outside stores/ nothing constructs them directly.
ADAPTER_CLASSES = {"BatchViewReader", "RealtimeReader", "RealtimeWriter", "VersionStore"}
CALLERS = ("ingest", "batch_layer", "speed_layer", "serving_layer", "reports", "api", "infra", "lambdactl", "dags")


def direct_constructions(root: Path = ROOT) -> list[str]:
    found = []
    for package in CALLERS:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Call):
                    name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                    if name in ADAPTER_CLASSES:
                        found.append(f"{path.relative_to(root)}:{node.lineno} {name}(...)")
    return found


def test_no_layer_constructs_a_store_adapter_directly():
    found = direct_constructions()
    assert not found, "build store adapters with stores.registry (the settings choose them):\n" + "\n".join(found)


def test_the_construction_check_sees_a_direct_construction(tmp_path):
    for package in CALLERS:
        (tmp_path / package).mkdir()
    (tmp_path / "reports" / "added.py").write_text(
        "def later(settings):\n    from stores import batch_views\n    return batch_views.VersionStore(settings)\n"
    )
    assert direct_constructions(tmp_path) == ["reports/added.py:3 VersionStore(...)"]
