"""The generator's ground truth (ingest/truth.py) holds each record to the verdict it was sent for:
the truth is computed with the contract the platform validates with, so following the contract's
verdict alone, it changed exactly as the platform did and the exactness tests passed whatever the
contract wrongly accepted or refused."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from definitions.layer_settings import EventLimits
from ingest.generator import INVALID_KINDS, ClickstreamGenerator, GeneratorConfig, SentRecord
from ingest.truth import VerdictMismatch, distinct_events


def sent(count: int = 4_000) -> list[SentRecord]:
    config = GeneratorConfig(seed=7, count=count, late_fraction=0.1, duplicate_fraction=0.1, invalid_fraction=0.3)
    now_ms = int(time.time() * 1000)
    return [
        SentRecord(r.kind, r.event_id, 0, offset, now_ms, r.value.decode())
        for offset, r in enumerate(ClickstreamGenerator(config).records())
    ]


def test_every_kind_the_generator_sends_gets_the_verdict_it_was_sent_for():
    records = sent()
    assert {r.kind for r in records} >= {"valid", "late", "duplicate", *INVALID_KINDS}, "every kind was drawn"
    events = distinct_events(records, EventLimits())
    assert len(events) == len({r.event_id for r in records if r.kind not in INVALID_KINDS})


def test_an_invalid_record_the_contract_accepted_is_named():
    records = sent(200)
    valid = next(r for r in records if r.kind == "valid")
    accepted = replace(valid, kind="unknown_field", offset=10_000)
    with pytest.raises(VerdictMismatch, match="offset 10000, sent as unknown_field, is accepted"):
        distinct_events([*records, accepted])


def test_an_event_the_platforms_limits_refuse_is_named():
    """Judged under the platform's own limits: a stricter one than the defaults refuses an event the
    generator meant, and the truth says so rather than dropping it as the platform does."""
    records = [r for r in sent(200) if r.kind == "valid"]
    with pytest.raises(VerdictMismatch, match="sent as valid, is refused"):
        distinct_events(records, EventLimits(min_event_time_s=int(time.time()) + 86_400))
