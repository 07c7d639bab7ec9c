"""The speed layer on the real stack: realtime rows summed per (key, event bucket) equal the truth,
late events land in their event bucket, duplicates count once, and a kill -9 changes nothing."""

from __future__ import annotations

import json
import os
import signal
import threading
import uuid

from definitions.events import parse_time
from infra.stack import Stack
from ingest.generator import GeneratorConfig, page_urls
from stores import checkpoints
from tests.support.events import fresh_seed, send
from tests.support.polling import wait_for
from tests.support.realtime import counted, counting_every_copy, truth, wait_until_exact


def prefix() -> str:
    return f"/t-{uuid.uuid4().hex[:8]}"


def test_realtime_views_equal_truth_with_late_and_duplicate_events(settings, stack):
    sent = send(
        settings,
        GeneratorConfig(
            seed=fresh_seed(),
            count=3_000,
            pages=40,
            url_prefix=prefix(),
            late_fraction=0.2,
            late_min_s=3 * 3_600,
            late_max_s=3 * 86_400,
            duplicate_fraction=0.08,
            invalid_fraction=0.05,
        ),
    )
    got = wait_until_exact(settings, sent)
    # Exact for top_pages too, whose cells are page_views' (one group for both, written as each).
    marker = checkpoints.read_marker(settings)
    assert marker is not None and marker.shares_cells, (
        "a checkpoint made by this release shares cells (a stack whose checkpoint is older: `lambdactl reset-speed`)"
    )

    late = [json.loads(r.value) for r in sent if r.kind == "late" and json.loads(r.value)["event_type"] == "page_view"]
    assert late, "the workload has late page views"
    oldest = min(late, key=lambda e: e["event_time"])
    day = int(parse_time(oldest["event_time"]).timestamp()) // 86_400 * 86_400
    assert got[("page_views", "day")][(oldest["url"], day)] >= 1, "a days-late event is in its own event bucket"

    # Duplicates count once: where a re-sent page view would change a count, the speed layer holds
    # the de-duplicated count, not the count of every copy.
    expected, every_copy = truth(sent)[("page_views", "minute")], counting_every_copy(sent, "minute")
    cells = [k for k, n in every_copy.items() if n != expected[k]]
    assert len(cells) > 10, "the workload re-sends page views, so counting every copy would show"
    held = got[("page_views", "minute")]
    assert [(k, held.get(k, 0)) for k in cells] == [(k, expected[k]) for k in cells]


def test_kill_9_mid_stream_keeps_totals_exact(settings, stack):
    # A minute of traffic, so that the kill lands while it flows even when micro-batches are slow.
    config = GeneratorConfig(
        seed=fresh_seed(),
        count=12_000,
        rate=200,
        pages=30,
        url_prefix=prefix(),
        duplicate_fraction=0.05,
        late_fraction=0.1,
    )
    result: dict = {}
    producer = threading.Thread(target=lambda: result.setdefault("sent", send(settings, config)))
    urls = {config.url_prefix + u for u in page_urls(config.pages)}
    producer.start()
    wait_for(lambda: counted(settings, urls), "the speed layer to write counts of this run", timeout_s=120)
    assert producer.is_alive(), "the kill comes mid-stream: the producer is still sending"
    job = stack.supervisor.process("speed-layer")
    assert job is not None
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)
    producer.join(120)
    # The supervisor restarts the job (or `up` does, if it has not yet); `up` waits until it is healthy.
    Stack(settings).up()
    again = stack.supervisor.process("speed-layer")
    assert again is not None and again.pid != job.pid, "a new speed-layer process runs"
    wait_until_exact(settings, result["sent"])
