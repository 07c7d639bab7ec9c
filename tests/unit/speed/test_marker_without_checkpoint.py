"""A checkpoint whose marker is gone is not a first start (no services: the checkpoint's reads are
given). Taken for one, every view was "maintained since time 0", so a view added last week was
served exact from any cutoff, and the bucket-size check was skipped."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from definitions.layer_settings import SpeedSettings
from definitions.settings import Settings
from definitions.views import PAGE_VIEWS, Registry
from speed_layer.checkpoint_start import check_checkpoint_settings
from stores import checkpoints, kafka_coverage, realtime_origin, realtime_schema, registry, replays


@pytest.fixture
def origin(monkeypatch) -> dict:
    """The realtime store's record of the start its rows come from: `held` is read, writes go to `written`."""
    state: dict = {"held": None, "written": []}
    monkeypatch.setattr(realtime_origin, "read_origin", lambda _settings: state["held"])
    monkeypatch.setattr(
        realtime_origin, "write_origin", lambda _settings, ms: state["written"].append(ms) or state.update(held=ms)
    )
    return state


@pytest.fixture
def stores(monkeypatch, origin):
    written: list[tuple] = []
    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({}, {}))
    monkeypatch.setattr(realtime_schema, "clear_rows", lambda _settings: written.append(("cleared",)) or [])
    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: None)
    monkeypatch.setattr(checkpoints, "write_marker", lambda *args, **kwargs: written.append(args + (kwargs,)))
    monkeypatch.setattr(registry, "version_store", lambda _settings: SimpleNamespace(pointer=lambda: None))
    monkeypatch.setattr(kafka_coverage, "unabsorbed_loss", lambda _settings: None)
    monkeypatch.setattr(checkpoints, "speed_layer_committed", lambda _settings: False)
    monkeypatch.setattr(checkpoints, "remove_checkpoint_dir", lambda _settings: written.append(("removed",)) or True)
    return written


def test_a_checkpoint_with_commits_and_no_marker_is_refused(stores, monkeypatch):
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: {0: 1_234})
    with pytest.raises(SystemExit, match="committed micro-batches but no marker"):
        check_checkpoint_settings(Settings(), Registry((PAGE_VIEWS,)))
    assert not stores, "no marker was written"
    # Commit files whose offsets cannot be read: Spark resumes from them all the same.
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: None)
    monkeypatch.setattr(checkpoints, "speed_layer_committed", lambda _settings: True)
    with pytest.raises(SystemExit, match="committed micro-batches but no marker"):
        check_checkpoint_settings(Settings(), Registry((PAGE_VIEWS,)))
    assert not stores, "nothing emptied"


def test_a_first_start_empties_the_realtime_tables_then_writes_its_marker(stores, monkeypatch):
    """After the checkpoint and its marker were removed (the documented change of ingest_bucket_s),
    the rows of the earlier checkpoint stayed beside the rows written again from Kafka: counted twice."""
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: None)
    assert check_checkpoint_settings(Settings(), Registry((PAGE_VIEWS,))).names() == ["page_views"]
    assert len(stores) == 3 and stores[0] == ("cleared",), "emptied before the marker says a fresh start"


def test_a_fresh_start_after_a_reset_checks_again_that_kafka_holds_what_no_batch_absorbed(stores, monkeypatch):
    """`lambdactl reset-speed` checks Kafka when it removes the marker; the next `up` may come days
    later, when retention has deleted records no batch run absorbed. The fresh start recomputes from
    Kafka's earliest offset, so it would have served those views short as exact."""
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: None)
    lost = (1_000, ["partition 1: offsets 0 to 41"], [])
    monkeypatch.setattr(kafka_coverage, "unabsorbed_loss", lambda _settings: lost)
    with pytest.raises(
        SystemExit, match="a fresh start.*Kafka no longer holds.*partition 1: offsets 0 to 41.*`lambdactl up`"
    ):
        check_checkpoint_settings(Settings(), Registry((PAGE_VIEWS,)))
    assert not stores, "nothing emptied, no marker written"


def test_a_marker_without_a_committed_checkpoint_is_a_fresh_start(stores, monkeypatch):
    """The checkpoint removed by hand (not by `lambdactl reset-speed`), its marker left: Spark read
    Kafka from the earliest offset again, but the start resumed the marker. The earlier rows stayed
    beside the rewritten ones, and nothing checked that Kafka still held what no batch absorbed."""
    marker = checkpoints.Marker(3600, 1_000, {"page_views": 5_000}, dedupe_window_s=999)
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: None)
    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: marker)
    # Another bucket size and dedupe window than the marker's: no checkpoint holds state made with them.
    assert check_checkpoint_settings(Settings(ingest_bucket_s=60), Registry((PAGE_VIEWS,))).names() == ["page_views"]
    assert stores[:2] == [("cleared",), ("removed",)], "what it planned under the old settings goes before the marker"
    assert stores[2][2] == {"page_views": 0}, "every view from the earliest offset, as Spark reads it"
    stores.clear()
    lost = (0, ["partition 0: offsets 0 to 9"], [])
    monkeypatch.setattr(kafka_coverage, "unabsorbed_loss", lambda _settings: lost)
    with pytest.raises(SystemExit, match="Kafka no longer holds.*partition 0: offsets 0 to 9"):
        check_checkpoint_settings(Settings(ingest_bucket_s=60), Registry((PAGE_VIEWS,)))
    assert not stores, "nothing emptied, no marker written"
    # Commit files whose offsets cannot be read: Spark resumes from them, so no fresh start.
    monkeypatch.setattr(checkpoints, "speed_layer_committed", lambda _settings: True)
    monkeypatch.setattr(kafka_coverage, "unabsorbed_loss", lambda _settings: pytest.fail("no fresh start"))
    with pytest.raises(SystemExit, match="ingest_bucket_s=3600"):
        check_checkpoint_settings(Settings(ingest_bucket_s=60), Registry((PAGE_VIEWS,)))
    assert ("cleared",) not in stores


def test_a_fresh_start_beside_a_recorded_replay_is_refused(stores, monkeypatch):
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: None)
    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({}, {"page_views": object()}))
    with pytest.raises(SystemExit, match=r"replays of \['page_views'\] switched: let a batch run absorb them"):
        check_checkpoint_settings(Settings(), Registry((PAGE_VIEWS,)))
    assert not stores, "nothing emptied, no marker written"
    # A replay not switched yet: only the replay removes its claim, a batch run never does.
    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({"clicks": object()}, {}))
    with pytest.raises(SystemExit, match=r"replay --view clicks --resume`\) or cancel it") as refused:
        check_checkpoint_settings(Settings(), Registry((PAGE_VIEWS,)))
    assert "lambdactl batch" not in str(refused.value) and not stores


def test_a_resumed_checkpoint_keeps_its_rows(stores, monkeypatch):
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: {0: 5})
    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: checkpoints.Marker(60, 1, dedupe_window_s=None))
    check_checkpoint_settings(Settings(ingest_bucket_s=60), Registry((PAGE_VIEWS,)))
    assert ("cleared",) not in stores


def test_a_fresh_start_records_in_the_store_the_start_its_rows_come_from(stores, origin, monkeypatch):
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: None)
    check_checkpoint_settings(Settings(), Registry((PAGE_VIEWS,)))
    marker = stores[-1]
    assert origin["written"] == [marker[1]], "the marker's started_ms"
    assert marker[-1] == {"origin": True, "dedupe": None, "cells": checkpoints.CELLS_SHARED}  # the scan, shared cells


@pytest.mark.parametrize(
    ("held", "says"), [(None, "holds no record of them"), (7_000, "holds the rows of another start")]
)
def test_a_checkpoint_whose_rows_the_store_does_not_hold_is_not_resumed(stores, origin, monkeypatch, held, says):
    """Cassandra's data lost, the keyspace dropped, or cassandra.keyspace / hosts changed while the
    checkpoint on HDFS stayed: resumed, the speed layer wrote again only the groups its next
    micro-batches touched, and every other ingest bucket since the cutoff was served short, as complete."""
    marker = checkpoints.Marker(60, 5_000, {"page_views": 5_000}, origin=True)
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: {0: 5})
    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: marker)
    origin["held"] = held
    with pytest.raises(SystemExit, match=f"keyspace lambda at 127.0.0.1.*{says}.*reset-speed"):
        check_checkpoint_settings(Settings(ingest_bucket_s=60), Registry((PAGE_VIEWS,)))
    assert not stores and origin["written"] == [], "nothing emptied, nothing written"
    origin["held"] = 5_000  # the store of that start
    check_checkpoint_settings(Settings(ingest_bucket_s=60), Registry((PAGE_VIEWS,)))


@pytest.mark.parametrize("held", [None, 7_000])
def test_a_marker_from_before_the_store_recorded_its_start_records_it_for_the_rows_there(
    stores, origin, monkeypatch, held
):
    """Written before the store recorded it, or restored from a backup, or by an earlier release after
    a downgrade (the store keeping a later start's record): nothing says the rows are another start's."""
    marker = checkpoints.Marker(60, 5_000, {"page_views": 5_000})  # no `realtime_origin`: an older marker
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: {0: 5})
    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: marker)
    origin["held"] = held
    check_checkpoint_settings(Settings(ingest_bucket_s=60), Registry((PAGE_VIEWS,)))
    assert origin["written"] == [5_000]
    assert stores[-1][1] == 5_000 and stores[-1][-1]["origin"] is True, "the marker says so from now on"
    # made before the de-duplication's operator was recorded: its state is dropDuplicatesWithinWatermark's
    assert stores[-1][-1]["dedupe"] is None


class MarkerFile:
    """HDFS holding the marker file `data` (read_marker's one read)."""

    def __init__(self, data: bytes | None) -> None:
        self.data = data

    def __call__(self, _settings):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def read(self, path: str, **_):
        return self.data


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b'{"format": 4, "ingest_bucket_s": 60}', "later release"),
        (b'{"format": "1", "ingest_bucket_s": 60}', "later release"),
        (b'{"ingest_bucket_s": 60, "started_ms": "yesterday"}', "not a marker"),
        (b'{"ingest_bucket_s": 60, "started_ms": true}', "not a marker"),
        # A number beyond a float's range is read as infinity: a traceback at every start, and
        # `reset-speed`, the way out, blamed the stores.
        (b'{"ingest_bucket_s": 1e400}', "not a marker"),
        (b'{"ingest_bucket_s": 60, "views": {"page_views": 1e400}}', "not a marker"),
    ],
)
def test_a_marker_this_release_cannot_read_whole_stops_the_speed_layer_naming_it(monkeypatch, data, says):
    """A later release's marker was read in part and rewritten without what this one does not know;
    one that is no marker restarted the job on a traceback, again and again."""
    from stores import webhdfs

    monkeypatch.setattr(webhdfs, "WebHdfs", MarkerFile(data))
    with pytest.raises(checkpoints.MarkerUnreadable, match=says):
        checkpoints.read_marker(Settings())
    with pytest.raises(SystemExit, match=says):
        check_checkpoint_settings(Settings(), Registry((PAGE_VIEWS,)))


def test_a_checkpoint_made_with_another_dedupe_window_is_refused(monkeypatch):
    """Its de-duplication state was made with that window (a host whose local settings were wiped
    while HDFS kept the checkpoint resumed it with another)."""
    from definitions.layer_settings import SpeedSettings
    from stores import webhdfs

    monkeypatch.setattr(
        webhdfs, "WebHdfs", MarkerFile(b'{"format": 1, "ingest_bucket_s": 3600, "dedupe_window_s": 60}')
    )
    settings = Settings(ingest_bucket_s=3600, speed=SpeedSettings(dedupe_window_s=600))
    assert checkpoints.read_marker(settings).dedupe_window_s == 60  # type: ignore[union-attr]
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: {0: 5})  # its state committed
    with pytest.raises(SystemExit, match="dedupe_window_s=60"):
        check_checkpoint_settings(settings, Registry((PAGE_VIEWS,)))


def test_a_checkpoint_whose_records_were_judged_by_other_limits_is_refused(monkeypatch):
    """settings.json edited by hand (or a limit changed without `reset-speed` first): resumed, the
    speed layer judged new records by the new limits while it had counted older ones by the old, and
    a record near a limit counted in one layer only, with no error anywhere."""
    from definitions.layer_settings import EventLimits, SpeedSettings
    from stores import webhdfs

    made = b'{"format": 1, "ingest_bucket_s": 60, "dedupe_window_s": 600, "events": {"max_record_bytes": 4096, "max_url_chars": 2048, "gone_limit": 1}}'
    monkeypatch.setattr(webhdfs, "WebHdfs", MarkerFile(made))
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: {0: 5})
    # As the checkpoint was made but for the limit (whatever the environment running the tests says).
    made_with = Settings(ingest_bucket_s=60, speed=SpeedSettings(dedupe_window_s=600), events=EventLimits())
    settings = made_with.model_copy(update={"events": EventLimits(max_record_bytes=8192)})
    assert checkpoints.read_marker(settings).changed_limits(settings) == ["events.max_record_bytes=4096"]  # type: ignore[union-attr]
    with pytest.raises(SystemExit, match="events.max_record_bytes=4096.*reset-speed"):
        check_checkpoint_settings(settings, Registry((PAGE_VIEWS,)))
    assert checkpoints.read_marker(made_with).changed_limits(made_with) == []  # type: ignore[union-attr]


def test_a_marker_records_its_format_and_dedupe_window_and_reads_back(monkeypatch):
    from definitions.layer_settings import SpeedSettings
    from stores import webhdfs

    hdfs = MarkerFile(None)
    hdfs.write_whole = lambda _path, data: setattr(hdfs, "data", data)  # type: ignore[attr-defined]
    monkeypatch.setattr(webhdfs, "WebHdfs", hdfs)
    settings = Settings(ingest_bucket_s=60, speed=SpeedSettings(dedupe_window_s=120))
    with pytest.raises(TypeError, match="dedupe"):  # a marker written again must name its state's operator
        checkpoints.write_marker(settings, 5_000, {"page_views": 0})  # type: ignore[call-arg]
    checkpoints.write_marker(settings, 5_000, {"page_views": 0}, dedupe=checkpoints.DEDUPE_TIMERS, cells=None)
    assert b'"format": 2' in hdfs.data, "it names the de-duplication operator"  # type: ignore[operator]
    limits = checkpoints.event_limits(settings)
    assert limits["max_record_bytes"] == settings.events.max_record_bytes and len(limits) == 8
    assert checkpoints.read_marker(settings) == checkpoints.Marker(
        60, 5_000, {"page_views": 0}, dedupe_window_s=120, events=limits, dedupe=checkpoints.DEDUPE_TIMERS
    )
    checkpoints.write_marker(
        settings, 5_000, {"page_views": 0}, origin=True, dedupe=checkpoints.DEDUPE_TIMERS, cells=None
    )
    assert checkpoints.read_marker(settings).origin is True  # type: ignore[union-attr]
    # a checkpoint made by dropDuplicatesWithinWatermark keeps saying so when its marker is written again
    for scan in (None, checkpoints.DEDUPE_SCAN):
        checkpoints.write_marker(settings, 5_000, {"page_views": 0}, origin=True, dedupe=scan, cells=None)
        assert b'"dedupe"' not in hdfs.data and b'"format": 1' in hdfs.data  # type: ignore[operator]
        assert checkpoints.read_marker(settings).dedupe is None  # type: ignore[union-attr]
    hdfs.data = hdfs.data.replace(b'"format": 1', b'"format": 1, "dedupe": "bloom"')  # type: ignore[attr-defined]
    with pytest.raises(checkpoints.MarkerUnreadable, match="dedupe 'bloom' is not an operator this release knows"):
        checkpoints.read_marker(settings)


def test_a_marker_says_its_state_shares_cells_in_a_format_earlier_releases_refuse(monkeypatch):
    """A release that labels cells by view, resuming a checkpoint whose state shares them, would start
    every view's groups again from zero in the middle of their ingest buckets: format 3 stops it."""
    from stores import webhdfs

    hdfs = MarkerFile(None)
    hdfs.write_whole = lambda _path, data: setattr(hdfs, "data", data)  # type: ignore[attr-defined]
    monkeypatch.setattr(webhdfs, "WebHdfs", hdfs)
    settings = Settings(ingest_bucket_s=60)
    with pytest.raises(TypeError, match="cells"):  # a marker written again must say how its state labels cells
        checkpoints.write_marker(settings, 5_000, {"page_views": 0}, dedupe=None)  # type: ignore[call-arg]
    for dedupe in (None, checkpoints.DEDUPE_TIMERS):
        checkpoints.write_marker(settings, 5_000, {"page_views": 0}, dedupe=dedupe, cells=checkpoints.CELLS_SHARED)
        assert json.loads(hdfs.data)["format"] == 3 == checkpoints.MARKER_FORMAT  # type: ignore[arg-type]
        read = checkpoints.read_marker(settings)
        assert read is not None and read.shares_cells and read.cells == checkpoints.CELLS_SHARED
        assert read.dedupe == dedupe
    checkpoints.write_marker(settings, 5_000, {"page_views": 0}, dedupe=None, cells=None)
    assert json.loads(hdfs.data)["format"] == 1 and "cells" not in json.loads(hdfs.data)  # type: ignore[arg-type]
    assert not checkpoints.read_marker(settings).shares_cells  # type: ignore[union-attr]
    hdfs.data = hdfs.data.replace(b'"format": 1', b'"format": 3, "cells": "by-colour"')  # type: ignore[attr-defined]
    with pytest.raises(checkpoints.MarkerUnreadable, match="cells 'by-colour' is not a labelling this release knows"):
        checkpoints.read_marker(settings)


def test_a_fresh_start_shares_cells_and_a_resumed_checkpoint_keeps_how_its_state_labels_them(stores, monkeypatch):
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: None)
    check_checkpoint_settings(Settings(), Registry((PAGE_VIEWS,)))
    assert stores[-1][-1]["cells"] == checkpoints.CELLS_SHARED
    for recorded in (None, checkpoints.CELLS_SHARED):
        marker = checkpoints.Marker(60, 5_000, {"page_views": 5_000}, dedupe_window_s=600, cells=recorded)
        monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: {0: 5})
        monkeypatch.setattr(checkpoints, "read_marker", lambda _settings, marker=marker: marker)
        check_checkpoint_settings(
            Settings(ingest_bucket_s=60, speed=SpeedSettings(dedupe_window_s=600)), Registry((PAGE_VIEWS,))
        )
        assert stores[-1][-1]["cells"] == recorded, "a checkpoint made before cells were shared goes on by view"


@pytest.mark.parametrize(("recorded", "runs"), [(checkpoints.DEDUPE_TIMERS, "first-copy-timers"), (None, "scan")])
def test_a_resumed_checkpoint_keeps_the_de_duplication_operator_its_state_was_made_by(
    stores, origin, monkeypatch, recorded, runs
):
    """The timers' operator cannot read the state dropDuplicatesWithinWatermark left (nor the other
    way round): a checkpoint made before the timers goes on with the scan, a new one with the timers."""
    from speed_layer.first_copies import dedupe_of

    marker = checkpoints.Marker(60, 5_000, {"page_views": 5_000}, dedupe_window_s=600, origin=True, dedupe=recorded)
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: {0: 5})
    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: marker)
    origin["held"] = 5_000
    settings = Settings(ingest_bucket_s=60, speed=SpeedSettings(dedupe_window_s=600))
    check_checkpoint_settings(settings, Registry((PAGE_VIEWS,)))  # written again: it records no limits
    assert stores[-1][-1]["dedupe"] == recorded, "the marker written again names the same operator"
    assert runs in dedupe_of(marker)
    assert dedupe_of(None) == checkpoints.DEDUPE_SCAN  # only a checkpoint's own marker says timers


def test_a_view_added_is_maintained_from_after_the_latest_record_kafka_holds_whatever_the_clocks(stores, monkeypatch):
    """A view added was recorded as maintained from this host's clock at the start. With the brokers'
    clock ahead, records the stopped speed layer counted without it carry ingest times after that:
    a batch cutoff at the next bucket left them to the speed layer, which never counted them for it."""
    from definitions.views import View
    from stores import kafka

    added = View("added_view", keys=("url",), aggregation="count")
    marker = checkpoints.Marker(60, 1_000, {"page_views": 5_000}, dedupe_window_s=600)
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: {0: 5})
    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: marker)
    ahead = int(time.time() * 1000) + 3_600_000  # the brokers' clock an hour ahead of this host's
    monkeypatch.setattr(kafka, "latest_ingest_ms", lambda _settings: ahead)
    settings = Settings(ingest_bucket_s=60, speed=SpeedSettings(dedupe_window_s=600))
    check_checkpoint_settings(settings, Registry((PAGE_VIEWS, added)))
    assert stores[-1][2] == {"page_views": 5_000, "added_view": ahead + 1}
    stores.clear()
    monkeypatch.setattr(kafka, "latest_ingest_ms", lambda _settings: None)  # an empty topic: this host's clock
    before = int(time.time() * 1000)
    check_checkpoint_settings(settings, Registry((PAGE_VIEWS, added)))
    assert before <= stores[-1][2]["added_view"] <= int(time.time() * 1000)
    stores.clear()
    monkeypatch.setattr(kafka, "latest_ingest_ms", lambda _settings: pytest.fail("asked with no view added"))
    check_checkpoint_settings(settings, Registry((PAGE_VIEWS,)))


@pytest.mark.parametrize(
    ("chosen", "recorded"),
    [
        (None, None),  # the default, the scan: the timers stall on a burst of expiries (README, Benchmarks)
        (checkpoints.DEDUPE_TIMERS, checkpoints.DEDUPE_TIMERS),
        (checkpoints.DEDUPE_SCAN, None),  # written as an earlier release wrote it: format 1, no operator
    ],
)
def test_a_fresh_start_makes_its_state_with_the_operator_the_settings_name(stores, monkeypatch, chosen, recorded):
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: None)
    speed = SpeedSettings() if chosen is None else SpeedSettings(dedupe_operator=chosen)
    check_checkpoint_settings(Settings(speed=speed), Registry((PAGE_VIEWS,)))
    assert stores[-1][-1]["dedupe"] == recorded


def test_a_resumed_checkpoint_keeps_the_operator_that_made_its_state_whatever_the_settings_name(stores, monkeypatch):
    """Neither operator reads the other's state: the setting chooses for a new checkpoint only."""
    marker = checkpoints.Marker(60, 5_000, {"page_views": 5_000}, dedupe_window_s=600, dedupe=checkpoints.DEDUPE_TIMERS)
    monkeypatch.setattr(checkpoints, "speed_layer_position", lambda _settings: {0: 5})
    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: marker)
    speed = SpeedSettings(dedupe_operator=checkpoints.DEDUPE_SCAN)
    check_checkpoint_settings(Settings(ingest_bucket_s=60, speed=speed), Registry((PAGE_VIEWS,)))
    assert stores[-1][-1]["dedupe"] == checkpoints.DEDUPE_TIMERS


def test_an_operator_the_release_does_not_have_is_refused_by_name():
    with pytest.raises(ValueError, match="dedupe_operator"):
        SpeedSettings(dedupe_operator="bloom")


def test_the_setting_names_the_operators_the_marker_records():
    import typing

    named = typing.get_args(SpeedSettings.model_fields["dedupe_operator"].annotation)
    assert set(named) == {checkpoints.DEDUPE_TIMERS, checkpoints.DEDUPE_SCAN}
