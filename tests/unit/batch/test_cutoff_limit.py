"""A requested cutoff the DAG's sensor could never see covered is refused at once (no service: the
completeness marker and the clock are given). The sensor gives up batch.completeness_wait_s after
its first poke; the limit was counted from the end of the current ingest bucket, so with hourly
buckets a cutoff up to an hour past any sensor's patience was accepted, held the DAG's only run slot
for an hour and failed as "Sensor has timed out"."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from batch_layer import job
from definitions.settings import Settings
from stores.pointer import CutoffError, NotCoveredYet

HOUR_MS = 3_600_000
TEN_PAST_TEN_MS = 1_795_000_000_000 // HOUR_MS * HOUR_MS + 10 * 60_000


@pytest.fixture
def at_ten_past_ten(monkeypatch):
    covered = SimpleNamespace(complete_before_ms=TEN_PAST_TEN_MS - 10 * 60_000 - 60_000, batch_id=40)
    monkeypatch.setattr(job.checkpoints, "read_marker", lambda _settings: None)
    monkeypatch.setattr(job.completeness, "latest", lambda _settings: covered)
    monkeypatch.setattr(job, "last_archived", lambda _settings: 40)
    monkeypatch.setattr(job.time, "time", lambda: TEN_PAST_TEN_MS / 1000)
    return Settings(ingest_bucket_s=3_600)


def test_a_cutoff_past_the_sensors_patience_is_refused_not_waited_for(at_ten_past_ten):
    two_hours_on = TEN_PAST_TEN_MS - 10 * 60_000 + 2 * HOUR_MS  # 12:00, sensor gives up at 11:10
    with pytest.raises(CutoffError, match="completeness_wait_s") as refused:
        job.choose_cutoff(at_ten_past_ten, two_hours_on, None)
    assert not isinstance(refused.value, NotCoveredYet)


def test_a_cutoff_the_archiver_can_cover_within_the_wait_is_waited_for(at_ten_past_ten):
    eleven = TEN_PAST_TEN_MS - 10 * 60_000 + HOUR_MS
    with pytest.raises(NotCoveredYet, match="not covered"):
        job.choose_cutoff(at_ten_past_ten, eleven, None)


@pytest.mark.parametrize(
    ("batch_id", "last", "ahead_ms", "words"),
    [
        (41, 40, 0, "of archiver batch 41, but the master dataset holds batches up to 40"),
        (3, None, 0, "holds no batch"),
        (40, 40, 3 * HOUR_MS, "after this host's clock"),
    ],
)
def test_a_completeness_marker_of_another_archive_or_far_ahead_is_refused_naming_it(
    at_ten_past_ten, monkeypatch, batch_id, last, ahead_ms, words
):
    """A marker outliving a master restored or rebuilt while the archiver was down (it drops such
    markers when it starts), or one written by hand: trusted, a run took a cutoff the master had not
    reached, served it and let the clean-up delete the realtime rows below it."""
    marker = SimpleNamespace(complete_before_ms=TEN_PAST_TEN_MS - 10 * 60_000 + ahead_ms, batch_id=batch_id)
    monkeypatch.setattr(job.completeness, "latest", lambda _settings: marker)
    monkeypatch.setattr(job, "last_archived", lambda _settings: last)
    with pytest.raises(CutoffError, match=words) as refused:
        job.choose_cutoff(at_ten_past_ten, None, None)
    assert f"{batch_id:012d}.json" in str(refused.value) and not isinstance(refused.value, NotCoveredYet)


def test_a_planned_cutoff_behind_what_serves_is_waited_for_a_requested_one_refused(at_ten_past_ten):
    """Completeness went back (its markers rebuilt with the master): the DAG's sensor failed every
    scheduled run at once instead of waiting for the archiver to pass the serving cutoff again."""
    from stores.pointer import Overtaken, Pointer, ViewEntry

    ahead = TEN_PAST_TEN_MS + HOUR_MS - 10 * 60_000  # serving at 11:00, covered below 10:00
    current = Pointer({"page_views": ViewEntry("page_views_7", 7, ahead)}, version=7)
    with pytest.raises(NotCoveredYet, match="behind what serves page_views.*waiting for the archiver"):
        job.choose_cutoff(at_ten_past_ten, None, current)
    nine = TEN_PAST_TEN_MS - 70 * 60_000
    with pytest.raises(Overtaken, match="behind what serves"):
        job.choose_cutoff(at_ten_past_ten, nine, current)
