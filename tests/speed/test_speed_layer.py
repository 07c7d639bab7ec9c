"""The speed layer on the real stack: realtime rows summed per (key, event bucket) equal the truth,
late events land in their event bucket, duplicates count once, and a kill -9 changes nothing."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid

from definitions.events import parse_time
from ingest.generator import GeneratorConfig
from infra.stack import Stack
from tests.ingest.helpers import send
from tests.speed.realtime import wait_until_exact


def prefix() -> str:
    return f"/t-{uuid.uuid4().hex[:8]}"


def test_realtime_views_equal_truth_with_late_and_duplicate_events(settings, stack):
    sent = send(settings, GeneratorConfig(seed=int(time.time()), count=3_000, pages=40, url_prefix=prefix(),
                                          late_fraction=0.2, late_min_s=3 * 3_600, late_max_s=3 * 86_400,
                                          duplicate_fraction=0.08, invalid_fraction=0.05))
    got = wait_until_exact(settings, sent)

    late = [json.loads(r.value) for r in sent if r.kind == "late" and json.loads(r.value)["event_type"] == "page_view"]
    assert late, "the workload has late page views"
    oldest = min(late, key=lambda e: e["event_time"])
    day = int(parse_time(oldest["event_time"]).timestamp()) // 86_400 * 86_400
    assert got[("page_views", "day")][(oldest["url"], day)] >= 1, "a days-late event is in its own event bucket"

    dups = [r for r in sent if r.kind == "duplicate"]
    assert dups and len({r.event_id for r in dups}) > 10, "duplicates were re-sent within the window"


def test_kill_9_mid_stream_keeps_totals_exact(settings, stack):
    config = GeneratorConfig(seed=int(time.time()) + 7, count=5_000, rate=500, pages=30, url_prefix=prefix(),
                             duplicate_fraction=0.05, late_fraction=0.1)
    result: dict = {}
    producer = threading.Thread(target=lambda: result.setdefault("sent", send(settings, config)))
    producer.start()
    time.sleep(5)
    job = stack.supervisor.process("speed-layer")
    assert job is not None
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)
    producer.join(120)
    assert Stack(settings).up()["speed-layer"] == "started"
    wait_until_exact(settings, result["sent"])
