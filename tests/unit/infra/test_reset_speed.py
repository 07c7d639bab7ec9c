"""`lambdactl reset-speed` refuses, before it stops or removes anything, what would leave the speed
layer's fresh start refused or a process still writing the checkpoint it removes (no service)."""

from __future__ import annotations

import argparse
import os

import pytest

from definitions.settings import Settings
from definitions.view_versions import Versions
from definitions.views import PAGE_VIEWS, Registry
from infra.errors import StackError
from infra.stack import Stack
from lambdactl.reset_speed import cmd_reset_speed
from stores.kafka import PartitionSpan


@pytest.fixture(autouse=True)
def the_topic_is_the_speed_layers(monkeypatch):
    """The topic check reads Kafka and HDFS: tests/integration/speed/test_reset_speed.py."""
    from lambdactl import reset_speed

    monkeypatch.setattr(reset_speed, "_topic_check", lambda _settings: (None, False))


ONE_PARTITION = [PartitionSpan(0, 0, 10, 0, 1_000)]


@pytest.fixture
def removed(monkeypatch):
    from lambdactl import reset_speed
    from stores import checkpoints

    # Kafka holds what no batch absorbed (the check itself runs against the real stores:
    # tests/integration/speed/test_reset_speed.py).
    monkeypatch.setattr(reset_speed, "unabsorbed_loss", lambda *_: None)
    monkeypatch.setattr(reset_speed, "read_versions", lambda *_, **__: Versions(Registry((PAGE_VIEWS,))))
    _pointer_is(monkeypatch, None)
    calls: list = []
    monkeypatch.setattr(checkpoints, "remove_checkpoint", lambda settings: calls.append(settings) or [])
    return calls


def _pointer_is(monkeypatch, pointer, reads: list | None = None) -> None:
    from stores import registry

    def read(_self):
        if reads is not None:
            reads.append(pointer)
        return pointer

    monkeypatch.setattr(registry, "version_store", lambda _s: type("V", (), {"pointer": read})())


def _args(stopped: bool = False) -> argparse.Namespace:
    return argparse.Namespace(stopped=stopped, json=False)


def test_a_recorded_replay_is_refused_before_anything_changes(tmp_path, monkeypatch, removed, caplog):
    from stores import replays

    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({"page_views": object()}, {}))
    monkeypatch.setattr(Stack, "stop", lambda *_: pytest.fail("stopped the speed layer"))
    assert cmd_reset_speed(Settings(state_dir=tmp_path), _args()) == 2
    assert "page_views" in caplog.text and "--cancel" in caplog.text
    assert removed == []


def test_a_speed_layer_this_stack_does_not_run_must_be_said_stopped(tmp_path, monkeypatch, removed, caplog):
    from stores import replays

    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({}, {}))
    settings = Settings(state_dir=tmp_path, stack={"managed_services": ["kafka", "api"]})
    with pytest.raises(StackError, match="speed-layer.*not a supervised process"):
        Stack(settings).stop("speed-layer")
    assert cmd_reset_speed(settings, _args()) == 2
    assert "reset-speed --stopped" in caplog.text
    assert removed == []
    assert cmd_reset_speed(settings, _args(stopped=True)) == 0
    assert removed == [settings]


def test_a_change_of_a_views_definition_not_switched_yet_is_refused_before_anything_changes(
    tmp_path, monkeypatch, removed, caplog
):
    """A fresh start knows only the declared definitions: it would maintain the changed one under the
    served storage name, whose batch table holds the old one, and answer each below and above the
    cutoff by another definition, as exact."""
    from dataclasses import replace

    from lambdactl import reset_speed
    from stores import replays

    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({}, {}))
    monkeypatch.setattr(Stack, "stop", lambda *_: pytest.fail("stopped the speed layer"))
    changed = replace(PAGE_VIEWS, name="page_views__0a1b2c3d")
    pending = Versions(Registry((PAGE_VIEWS, changed)), {"page_views": PAGE_VIEWS}, {"page_views": changed})
    monkeypatch.setattr(reset_speed, "read_versions", lambda *_, **__: pending)
    assert cmd_reset_speed(Settings(state_dir=tmp_path), _args(stopped=True)) == 2
    assert "page_views" in caplog.text and "views apply" in caplog.text
    assert removed == []
    caplog.clear()
    unresolved = Versions(Registry(()), {"page_views": PAGE_VIEWS}, unresolved=("page_views",))
    monkeypatch.setattr(reset_speed, "read_versions", lambda *_, **__: unresolved)
    assert cmd_reset_speed(Settings(state_dir=tmp_path), _args(stopped=True)) == 2
    assert "page_views" in caplog.text and removed == []

    def damaged(*_, **__):
        from stores.checkpoints import MarkerUnreadable

        raise MarkerUnreadable("the marker holds no marker")

    # A damaged marker is a reason to reset, not a refusal: there is no recorded definition to keep.
    monkeypatch.setattr(reset_speed, "read_versions", damaged)
    assert cmd_reset_speed(Settings(state_dir=tmp_path), _args(stopped=True)) == 0
    assert len(removed) == 1


def test_a_reset_whose_kafka_check_cannot_be_made_removes_nothing(tmp_path, monkeypatch, removed, caplog):
    from lambdactl import reset_speed
    from stores import replays

    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({}, {}))

    def unreachable(settings):
        raise ConnectionRefusedError("HBase is down")

    monkeypatch.setattr(reset_speed, "unabsorbed_loss", unreachable)
    monkeypatch.setattr(Stack, "stop", lambda *_: pytest.fail("stopped the speed layer"))
    assert cmd_reset_speed(Settings(state_dir=tmp_path), _args(stopped=True)) == 2
    assert "Kafka still holds" in caplog.text and "lambdactl up" in caplog.text
    assert removed == []


def test_a_declared_view_no_batch_run_computed_makes_the_whole_topic_count(monkeypatch, caplog):
    """`views apply` stopped before the new view's batch run: a fresh start records it maintained,
    so it is answered from realtime rows alone; Kafka's retention must still hold all of its history."""
    from lambdactl import reset_speed
    from stores import kafka, kafka_coverage, replays
    from stores.pointer import Pointer, ViewEntry

    settings = Settings(state_dir="/nonexistent")
    built = ("page_views", "page_views_by_channel", "page_views_by_country_device", "unique_visitors")
    entries = {name: ViewEntry(f"{name}_v1", 1, 600_000) for name in built}  # top_pages: declared, never computed
    pointer = Pointer(entries=entries, version=1)
    _pointer_is(monkeypatch, pointer)
    floors: list[int] = []
    monkeypatch.setattr(kafka, "spans_from", lambda _s, floor: floors.append(floor) or ONE_PARTITION)
    monkeypatch.setattr(
        kafka,
        "lost_since",
        lambda spans, floor, _again=False: ["partition 0: offsets 0 to 9"] if floor < 600_000 else [],
    )
    assert kafka_coverage.unbuilt_views(settings, pointer) == ["top_pages"]
    assert reset_speed.unabsorbed_loss(settings) == (0, ["partition 0: offsets 0 to 9"], ["top_pages"])
    assert floors == [0]
    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({}, {}))
    monkeypatch.setattr(reset_speed, "read_versions", lambda *_, **__: Versions(Registry((PAGE_VIEWS,))))
    monkeypatch.setattr(Stack, "stop", lambda *_: pytest.fail("stopped the speed layer"))
    assert cmd_reset_speed(settings, _args(stopped=True)) == 2
    assert "no batch run yet of top_pages: the whole topic" in caplog.text
    full = Pointer(entries={**entries, "top_pages": ViewEntry("top_pages_v1", 1, 600_000)}, version=1)
    _pointer_is(monkeypatch, full)
    assert reset_speed.unabsorbed_loss(settings) is None and floors[-1] == 600_000


def test_a_view_module_that_does_not_load_is_named_not_taken_for_a_store_down(tmp_path, monkeypatch, removed, caplog):
    from lambdactl import reset_speed
    from stores import replays

    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({}, {}))

    def broken(_settings):
        raise ImportError("No module named 'team_views'")

    monkeypatch.setattr(reset_speed, "load_views", broken)
    assert cmd_reset_speed(Settings(state_dir=tmp_path), _args(stopped=True)) == 2
    assert "cannot be loaded" in caplog.text and "team_views" in caplog.text
    assert "HBase up" not in caplog.text and removed == []


def test_both_checks_judge_one_reading_of_the_pointer_and_one_loading_of_the_views(monkeypatch, removed):
    """A batch run swapping between two readings would have the definition check and the Kafka check
    judge different states."""
    from lambdactl import reset_speed
    from stores import kafka, kafka_coverage, replays
    from stores.pointer import Pointer, ViewEntry

    monkeypatch.setattr(reset_speed, "unabsorbed_loss", kafka_coverage.unabsorbed_loss)
    pointer = Pointer(entries={"page_views": ViewEntry("page_views_v1", 1, 600_000)}, version=1)
    reads: list = []
    _pointer_is(monkeypatch, pointer, reads)
    loaded: list = []
    monkeypatch.setattr(reset_speed, "load_views", lambda _s: loaded.append(1) or Registry((PAGE_VIEWS,)))
    given: list = []
    monkeypatch.setattr(reset_speed, "read_versions", lambda _s, declared, **kw: given.append(kw) or Versions(declared))
    floors: list[int] = []
    monkeypatch.setattr(kafka, "spans_from", lambda _s, floor: floors.append(floor) or ONE_PARTITION)
    monkeypatch.setattr(kafka, "lost_since", lambda spans, floor, _again=False: [])
    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({}, {}))
    assert cmd_reset_speed(Settings(state_dir="/nonexistent"), _args(stopped=True)) == 0
    assert reads == [pointer] and loaded == [1]
    assert given == [{"pointer": pointer}] and floors == [600_000]


def test_a_replay_under_way_is_told_to_resume_or_cancel_and_a_switched_one_to_be_absorbed(
    tmp_path, monkeypatch, removed, caplog
):
    """A batch run absorbs a replay that switched; it never removes a claim (a replay killed before its
    switch): only `replay --resume` or `--cancel` does, and the advice to run a batch left the reset
    refused however often it was followed."""
    from stores import replays

    monkeypatch.setattr(Stack, "stop", lambda *_: pytest.fail("stopped the speed layer"))
    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({"page_views": object()}, {}))
    assert cmd_reset_speed(Settings(state_dir=tmp_path), _args()) == 2
    assert "replay --view page_views --resume" in caplog.text and "--cancel" in caplog.text
    assert "lambdactl batch" not in caplog.text
    caplog.clear()
    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({}, {"clicks": object()}))
    assert cmd_reset_speed(Settings(state_dir=tmp_path), _args()) == 2
    assert "clicks" in caplog.text and "lambdactl batch" in caplog.text and "clean-realtime" in caplog.text
    assert "--resume" not in caplog.text and removed == []


def test_replays_that_cannot_be_read_are_named_and_nothing_changes(tmp_path, monkeypatch, removed, caplog):
    from stores import replays

    def unreachable(_settings):
        raise ConnectionRefusedError("HDFS is down")

    monkeypatch.setattr(replays, "read_replays", unreachable)
    monkeypatch.setattr(Stack, "stop", lambda *_: pytest.fail("stopped the speed layer"))
    assert cmd_reset_speed(Settings(state_dir=tmp_path), _args()) == 2
    assert "replays" in caplog.text and "HDFS is down" in caplog.text and "lambdactl up" in caplog.text
    assert removed == []


def test_a_speed_layer_still_running_keeps_its_checkpoint(tmp_path, monkeypatch, removed, caplog):
    """A speed layer the supervisor did not start (by hand, or `--stopped` said of a running one) holds
    its lock: its checkpoint was removed under it, and its next commits refused the next start."""
    from definitions.files import state_lock
    from stores import replays

    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({}, {}))
    settings = Settings(state_dir=tmp_path)
    with state_lock(tmp_path, "speed-layer.lock", "the speed-layer", wait=False):  # as speed_layer.job holds it
        assert cmd_reset_speed(settings, _args(stopped=True)) == 2
    assert "still runs" in caplog.text and f"pid {os.getpid()}" in caplog.text
    assert removed == []
    assert cmd_reset_speed(settings, _args(stopped=True)) == 0 and removed == [settings]


def test_a_topic_with_no_partitions_is_no_topic_with_nothing_lost(monkeypatch):
    """Read as "nothing deleted", a fresh start (which checks this too) emptied the realtime tables
    and served answers without the topic's records as exact."""
    from stores import kafka, kafka_coverage
    from stores.pointer import Pointer, ViewEntry

    _pointer_is(monkeypatch, Pointer(entries={"page_views": ViewEntry("page_views_v1", 1, 600_000)}, version=1))
    monkeypatch.setattr(kafka, "spans_from", lambda _s, floor: [])
    with pytest.raises(kafka_coverage.NoSuchTopic, match="topic events-elsewhere has no partitions"):
        kafka_coverage.unabsorbed_loss(
            Settings(state_dir="/nonexistent", kafka={"events_topic": "events-elsewhere"}), Registry((PAGE_VIEWS,))
        )


def test_a_topic_made_again_counts_everything_before_its_first_record_lost(monkeypatch):
    """Its offsets start at 0, read as "nothing deleted": a fresh start then served the answers
    missing the old topic's unabsorbed records as exact. Once a batch run's cutoff passes the new
    topic's first record, nothing of it is missing."""
    from stores import kafka, kafka_coverage
    from stores.pointer import Pointer, ViewEntry

    settings = Settings(state_dir="/nonexistent")
    monkeypatch.setattr(kafka, "spans_from", lambda _s, floor: [PartitionSpan(0, 0, 10, 0, 2_000_000)])
    for cutoff, lost in ((1_000_000, True), (3_000_000, False)):
        _pointer_is(monkeypatch, Pointer(entries={"page_views": ViewEntry("page_views_v1", 1, cutoff)}, version=1))
        found = kafka_coverage.unabsorbed_loss(settings, Registry((PAGE_VIEWS,)), made_again=True)
        assert (found is not None) == lost, found
        assert kafka_coverage.unabsorbed_loss(settings, Registry((PAGE_VIEWS,))) is None, "offsets from 0: kept"
    early = Pointer(entries={"page_views": ViewEntry("page_views_v1", 1, 1_000_000)}, version=1)
    found = kafka_coverage.unabsorbed_loss(settings, Registry((PAGE_VIEWS,)), early, True)
    assert found is not None and "is of the topic made again" in kafka_coverage.loss_message(found)
