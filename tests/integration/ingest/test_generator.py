"""The clickstream generator: deterministic, realistic, and honest about what it sent."""

from __future__ import annotations

import collections
import io
import json
from datetime import UTC, datetime

import pytest

from definitions.events import InvalidEvent, validate
from ingest.generator import INVALID_KINDS, ClickstreamGenerator, GeneratorConfig, produce

START = datetime(2026, 11, 20, 0, 0, tzinfo=UTC)


def records(**kw):
    return list(ClickstreamGenerator(GeneratorConfig(start=START, span_s=86_400, **kw)).records())


def test_same_seed_same_stream_other_seed_other_stream():
    a = records(seed=11, count=500, late_fraction=0.1, duplicate_fraction=0.05, invalid_fraction=0.05)
    b = records(seed=11, count=500, late_fraction=0.1, duplicate_fraction=0.05, invalid_fraction=0.05)
    c = records(seed=12, count=500, late_fraction=0.1, duplicate_fraction=0.05, invalid_fraction=0.05)
    assert [(r.kind, r.key, r.value) for r in a] == [(r.kind, r.key, r.value) for r in b]
    assert [r.value for r in a] != [r.value for r in c]


def test_fractions_and_kinds():
    rs = records(seed=5, count=20_000, late_fraction=0.1, duplicate_fraction=0.05, invalid_fraction=0.08)
    kinds = collections.Counter(r.kind for r in rs)
    assert abs(kinds["late"] / 20_000 - 0.10) < 0.01
    assert abs(kinds["duplicate"] / 20_000 - 0.05) < 0.01
    assert abs(sum(kinds[k] for k in INVALID_KINDS) / 20_000 - 0.08) < 0.01
    assert all(kinds[k] > 0 for k in INVALID_KINDS)


def test_every_record_gets_the_verdict_its_kind_implies():
    ingest_ms = int(START.timestamp() * 1000)
    for r in records(seed=9, count=3_000, late_fraction=0.1, duplicate_fraction=0.05, invalid_fraction=0.1):
        try:
            validate(r.value, ingest_ms)
            valid = True
        except InvalidEvent:
            valid = False
        assert valid == (r.kind in ("valid", "late", "duplicate")), (r.kind, r.value[:200])


def test_duplicates_resend_the_same_bytes_of_an_earlier_event():
    rs = records(seed=3, count=2_000, duplicate_fraction=0.1)
    first = {}
    for r in rs:
        if r.kind == "duplicate":
            assert first[r.event_id] == r.value
        else:
            first.setdefault(r.event_id, r.value)


def test_late_events_are_hours_to_days_behind():
    rs = records(seed=4, count=3_000, late_fraction=0.2, late_min_s=3_600, late_max_s=2 * 86_400)
    on_time = [json.loads(r.value)["event_time"] for r in rs if r.kind == "valid"]
    late = [json.loads(r.value)["event_time"] for r in rs if r.kind == "late"]
    assert min(late) < "2026-11-18T00:00" and min(on_time) >= "2026-11-19T00:00"


def test_zipf_popularity_and_daily_rhythm():
    rs = [json.loads(r.value) for r in records(seed=6, count=20_000) if r.kind == "valid"]
    by_url = collections.Counter(e["url"] for e in rs)
    ranked = [u for u, _ in by_url.most_common()]
    assert ranked[0] == "/" and by_url["/"] > 5 * by_url[ranked[20]]
    by_hour = collections.Counter(int(e["event_time"][11:13]) for e in rs)
    assert by_hour[15] > 2 * by_hour[3]


def test_sessions_keep_a_user_on_one_device_and_country():
    rs = [json.loads(r.value) for r in records(seed=8, count=5_000) if r.kind == "valid"]
    traits = collections.defaultdict(set)
    for e in rs:
        traits[e["user_id"]].add((e["device"], e["country"]))
    assert all(len(t) == 1 for t in traits.values())
    assert sum(1 for e in rs if e["referrer"]) < len(rs) / 2


def test_bad_knobs_are_refused():
    with pytest.raises(ValueError, match="late_fraction"):
        GeneratorConfig(late_fraction=1.5)
    with pytest.raises(ValueError, match="add up"):
        GeneratorConfig(late_fraction=0.6, invalid_fraction=0.6)


def test_produce_records_partition_offset_and_broker_timestamp(settings, stack, unique):
    from kafka.admin import NewTopic

    from stores.clients import kafka_admin

    topic = f"test-gen-{unique}"
    admin = kafka_admin(settings)
    admin.create_topics([NewTopic(topic, 3, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})])
    admin.close()
    out = io.StringIO()
    report = produce(settings, GeneratorConfig(seed=1, count=1_000, invalid_fraction=0.1, topic=topic), out)
    sent = [json.loads(line) for line in out.getvalue().splitlines()]
    assert report.sent == 1_000 and report.failed == 0 and len(sent) == 1_000
    assert len({(s["partition"], s["offset"]) for s in sent}) == 1_000
    # LogAppendTime: the broker's stamp, close to now, not the producer's create time.
    now_ms = datetime.now(UTC).timestamp() * 1000
    assert all(abs(s["ingest_time_ms"] - now_ms) < 120_000 for s in sent)
    assert report.rate > 0


def test_cli_generate_writes_events_and_truth(settings, stack, tmp_path, unique):
    import subprocess
    import sys

    from kafka.admin import NewTopic

    from ingest.generator import read_sent
    from stores.clients import kafka_admin

    topic = f"test-cli-{unique}"
    admin = kafka_admin(settings)
    admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})])
    admin.close()
    truth_path = tmp_path / "truth.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lambdactl.cli",
            "generate",
            "--count",
            "800",
            "--seed",
            "5",
            "--topic",
            topic,
            "--duplicate-fraction",
            "0.1",
            "--invalid-fraction",
            "0.1",
            "--span",
            "7200",
            "--start",
            "2026-11-20T12:00:00+00:00",
            "--truth-out",
            str(truth_path),
            "--granularity",
            "hour",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "records in" in done.stderr and "/s)" in done.stderr
    sent = read_sent(truth_path.with_suffix(".events.jsonl"))
    assert len(sent) == 800
    truth = json.loads(truth_path.read_text())
    distinct = {json.loads(r.value)["event_id"] for r in sent if r.kind in ("valid", "duplicate")}
    assert truth["events"] == len(distinct)
    page_views = [
        json.loads(r.value) for r in sent if r.kind == "valid" and json.loads(r.value)["event_type"] == "page_view"
    ]
    assert sum(c["page_views"] for buckets in truth["views"].values() for c in buckets.values()) == len(page_views)
    assert set(truth["views"]["/"]) <= {"2026-11-20T10:00:00Z", "2026-11-20T11:00:00Z"}
