"""When batch runs stop for longer than realtime rows live, answers say so (no services)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from definitions.settings import Settings
from serving_layer.staleness import Horizon, stale_reason

HOUR = 3_600
HORIZON = Horizon(ttl_s=10 * HOUR, margin_s=HOUR)
CUTOFF_MS = 1_800_000_000_000
STARTED_MS = CUTOFF_MS - 5 * 86_400_000  # the speed layer began long before the cutoff


def reason_at(
    now_s: float, cutoff_ms: int = CUTOFF_MS, version: int | None = 7, started_ms: int | None = STARTED_MS
) -> str | None:
    return stale_reason("page_views", version, cutoff_ms, started_ms, now_s, HORIZON)


def test_an_answer_is_complete_until_the_margin_before_its_oldest_rows_could_expire():
    expiry_s = CUTOFF_MS / 1000 + HORIZON.ttl_s
    assert reason_at(CUTOFF_MS / 1000) is None
    assert reason_at(expiry_s - HORIZON.margin_s - 1) is None
    soon = reason_at(expiry_s - HORIZON.margin_s)
    assert soon is not None and "expire 36000s after" in soon
    gone = reason_at(expiry_s + 1)
    assert gone is not None and "have expired 36000s after" in gone


def test_the_reason_names_the_view_its_version_cutoff_and_the_remedy():
    reason = reason_at(CUTOFF_MS / 1000 + HORIZON.ttl_s)
    assert reason is not None
    assert reason.startswith(
        "stale: the batch view of page_views (version 7) covers events ingested before 2027-01-15T08:00:00Z"
    )
    assert "`lambdactl batch`" in reason and len(reason) < 400


def test_with_no_batch_run_the_speed_layers_start_bounds_the_oldest_row():
    started_ms = CUTOFF_MS
    assert reason_at(started_ms / 1000 + 8 * HOUR, cutoff_ms=0, version=None, started_ms=started_ms) is None
    reason = reason_at(started_ms / 1000 + 9 * HOUR, cutoff_ms=0, version=None, started_ms=started_ms)
    assert reason is not None and "no batch run has computed page_views yet" in reason


def test_a_speed_layer_that_started_after_the_cutoff_moves_the_horizon():
    started_ms = CUTOFF_MS + 5 * HOUR * 1000
    assert reason_at(CUTOFF_MS / 1000 + 9 * HOUR, started_ms=started_ms) is None
    assert reason_at(started_ms / 1000 + 9 * HOUR, started_ms=started_ms) is not None


def test_before_the_speed_layers_first_start_nothing_can_expire():
    assert reason_at(CUTOFF_MS / 1000 + 100 * HOUR, started_ms=None) is None


def test_the_realtime_ttl_is_derived_from_the_batch_schedule_unless_set():
    assert Settings(_env_file=None).realtime_ttl_s == 3 * 86_400
    slow = Settings(batch={"interval_s": 12 * HOUR})
    assert slow.realtime_ttl_s == 10 * 12 * HOUR
    assert Settings(speed={"ttl_s": 20 * HOUR}).realtime_ttl_s == 20 * HOUR
    assert Horizon.from_settings(slow) == Horizon(120 * HOUR, HOUR)


def test_a_ttl_too_short_for_the_schedule_is_refused_naming_it():
    with pytest.raises(ValidationError) as refused:
        Settings(batch={"interval_s": 6 * HOUR}, speed={"ttl_s": 12 * HOUR})
    assert "speed.ttl_s (43200s) must be at least two batch intervals plus speed.stale_margin_s" in str(refused.value)


def test_rows_written_before_a_recorded_raise_of_the_ttl_make_answers_stale_on_the_old_ttl():
    raised_ms = CUTOFF_MS + 2 * HOUR * 1000  # the TTL went from 10 to 100 hours after the cutoff
    horizon = Horizon(ttl_s=100 * HOUR, margin_s=HOUR, changes=((0, 10 * HOUR), (raised_ms, 100 * HOUR)))
    early = stale_reason("page_views", 7, CUTOFF_MS, STARTED_MS, CUTOFF_MS / 1000 + 9 * HOUR, horizon)
    assert early is not None and "expire 36000s after" in early
    # Once a batch run's cutoff is past the raise, every row an answer needs lives 100 hours.
    later = raised_ms + HOUR * 1000
    assert stale_reason("page_views", 8, later, STARTED_MS, later / 1000 + 90 * HOUR, horizon) is None


def test_a_recorded_lowering_of_the_ttl_bounds_the_rows_written_before_it():
    lowered_ms = CUTOFF_MS + 2 * HOUR * 1000  # from 100 hours down to 10
    horizon = Horizon(ttl_s=10 * HOUR, margin_s=HOUR, changes=((0, 100 * HOUR), (lowered_ms, 10 * HOUR)))
    assert stale_reason("page_views", 7, CUTOFF_MS, STARTED_MS, lowered_ms / 1000 + 8 * HOUR, horizon) is None
    reason = stale_reason("page_views", 7, CUTOFF_MS, STARTED_MS, lowered_ms / 1000 + 10 * HOUR, horizon)
    assert reason is not None and "realtime rows written since 2027-01-15T10:00:00Z have expired 36000s" in reason
