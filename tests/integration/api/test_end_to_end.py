"""End to end through the running API on the real stack: merged answers equal ground truth before
a batch run, after it (now mostly batch), after more traffic; and with Cassandra stopped the API
answers as specified — a 503 naming it, or a flagged partial answer — never a wrong number."""

from __future__ import annotations

import calendar
import time
import uuid
from collections import defaultdict
from datetime import UTC

import httpx
import pytest

from batch_layer.job import run_batch
from infra.stack import Stack
from ingest.generator import SentRecord
from ingest.truth import distinct_events
from stores import completeness
from stores.batch_views import PointerMoved, VersionStore
from stores.realtime_cleanup import delete_absorbed
from tests.support.events import mixed_workload, wait_cutoff_past
from tests.support.polling import wait_for
from tests.support.realtime import planned_offsets

HOUR = 3_600


def epoch(iso: str) -> int:
    return calendar.timegm(time.strptime(iso, "%Y-%m-%dT%H:%M:%SZ"))


def api(settings) -> str:
    return f"http://{settings.api.host}:{settings.api.port}"


def truth(sent: list[SentRecord]) -> tuple[dict[str, dict[int, int]], dict[str, dict[int, set]]]:
    views: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    visitors: dict[str, dict[int, set]] = defaultdict(lambda: defaultdict(set))
    for e in distinct_events(sent):
        if e["event_type"] == "page_view":
            bucket = e["event_time"] // 1000 // HOUR * HOUR
            views[e["url"]][bucket] += 1
            visitors[e["url"]][bucket].add(e["user_id"])
    return views, visitors


def window(sent: list[SentRecord]) -> tuple[str, str]:
    from datetime import datetime

    times = [e["event_time"] // 1000 for e in distinct_events(sent)]
    start, end = min(times) // HOUR * HOUR, (max(times) // HOUR + 1) * HOUR
    fmt = lambda s: datetime.fromtimestamp(s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    return fmt(start), fmt(end)


def merged(settings, url: str, start: str, end: str, view: str = "page_views", **extra) -> httpx.Response:
    return httpx.get(
        f"{api(settings)}/api/v1/views/{view}",
        params={"url": url, "granularity": "hour", "start": start, "end": end, **extra},
        timeout=30,
    )


def mismatches(settings, sent: list[SentRecord]) -> list[str]:
    views, _ = truth(sent)
    start, end = window(sent)
    out = []
    for url, buckets in views.items():
        resp = merged(settings, url, start, end)
        if resp.status_code != 200:
            out.append(f"{url}: HTTP {resp.status_code} {resp.text[:200]}")
            continue
        body = resp.json()
        got = {epoch(b["bucket"]): b["value"] for b in body["series"] if b["value"]}
        if got != dict(buckets):
            out.append(f"{url}: merged {sorted(got.items())[:4]}… truth {sorted(buckets.items())[:4]}…")
        elif body["total"] != sum(buckets.values()):
            out.append(f"{url}: total {body['total']} != {sum(buckets.values())}")
    return out


def wait_exact(settings, sent: list[SentRecord], timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        diffs = mismatches(settings, sent)
        if not diffs:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(diffs)} URLs differ from the truth: " + "; ".join(diffs[:5]))
        time.sleep(1)


def parts(settings, sent: list[SentRecord]) -> tuple[int, int]:
    views, _ = truth(sent)
    start, end = window(sent)
    batch = speed = 0
    for url in views:
        for b in merged(settings, url, start, end).json()["series"]:
            batch += b["batch"]
            speed += b["speed"]
    return batch, speed


def top_problems(rows: list[dict], totals: dict[str, int], limit: int) -> list[str]:
    """What is wrong with a top-pages answer, given the true totals of the test's own URLs (other
    traffic shares the window: a URL of ours may be missing only if it ranks below the last row)."""
    values = [r["value"] for r in rows]
    problems = [] if values == sorted(values, reverse=True) else [f"rows not ranked by value: {values[:10]}…"]
    problems += [
        f"{r['url']}: value {r['value']} != batch {r['batch']} + speed {r['speed']}"
        for r in rows
        if r["value"] != r["batch"] + r["speed"]
    ]
    floor = values[-1] if len(rows) == limit else 0
    shown = {r["url"]: r["value"] for r in rows}
    for url, total in totals.items():
        if url in shown and shown[url] != total:
            problems.append(f"{url}: top pages says {shown[url]}, truth {total}")
        elif url not in shown and total > floor:
            problems.append(f"{url} ({total} views) is missing; the list ends at {floor}")
    return problems


def batch_part(sent: list[SentRecord], url: str, cutoff_ms: int) -> dict[int, int]:
    """{hour bucket: page views} of `url` over the events first ingested before `cutoff_ms`: what
    the batch views of that cutoff hold."""
    out: dict[int, int] = defaultdict(int)
    for e in distinct_events(sent):
        if e["url"] == url and e["event_type"] == "page_view" and e["ingest_time_ms"] < cutoff_ms:
            out[e["event_time"] // 1000 // HOUR * HOUR] += 1
    return dict(out)


def unavailable_component(body: dict) -> str | None:
    """The component a 503 body names (at the top level, or inside `detail`)."""
    detail = body.get("detail")
    return body.get("component") or (detail.get("component") if isinstance(detail, dict) else None)


def batch_past(settings, spark, sent: list[SentRecord], attempts: int = 3):
    """Run a batch whose cutoff is past every record of `sent` (again, if another run's swap won
    the pointer's compare-and-set meanwhile)."""
    wait_cutoff_past(settings, sent)
    for attempt in range(attempts):
        try:
            return run_batch(settings, spark=spark)
        except PointerMoved:
            if attempt == attempts - 1:
                raise


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"/e2e-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def traffic() -> list[SentRecord]:
    """What the first test sent (and batched, in part): the outage test checks its batch part."""
    return []


def test_merged_answers_stay_exact_through_a_batch_run(settings, stack, spark, prefix, traffic):
    first = mixed_workload(settings, prefix, 2_500, 25)
    wait_exact(settings, first)
    batch_before, speed_before = parts(settings, first)
    assert speed_before > 0

    result = batch_past(settings, spark, first)
    assert VersionStore(settings).pointer().version == result.version
    wait_exact(settings, first)
    # Realtime rows the new version absorbed can go: answers stay the same.
    cleanup = delete_absorbed(settings, result.cutoff_ms // 1000)
    assert cleanup.deletions > 0 and cleanup.complete, cleanup.summary()
    wait_exact(settings, first)
    batch_after, speed_after = parts(settings, first)
    assert batch_after + speed_after == batch_before + speed_before
    assert batch_after > speed_after, "after the batch run the answers are mostly batch"
    assert speed_after == 0, "every record of the workload is below the new cutoff"

    second = mixed_workload(settings, prefix, 2_500, 25)
    traffic.extend(first + second)
    wait_exact(settings, first + second)
    batch_mixed, speed_mixed = parts(settings, first + second)
    assert batch_mixed > 0 and speed_mixed > 0, "answers now mix both layers"

    # unique visitors: batch exact where no speed part, sketches within the HLL bound when merged
    _, visitors = truth(first + second)
    start, end = window(first + second)
    url = max(visitors, key=lambda u: sum(len(v) for v in visitors[u].values()))
    body = merged(settings, url, start, end, view="unique_visitors").json()
    for b in body["series"]:
        expected = len(visitors[url].get(epoch(b["bucket"]), ()))
        if b["exact"]:
            assert b["value"] == expected
        else:
            assert abs(b["value"] - expected) <= max(1.0, 0.05 * expected), (b, expected)

    top = httpx.get(
        f"{api(settings)}/api/v1/views/top_pages",
        params={"granularity": "hour", "start": start, "end": end, "limit": 100},
        timeout=30,
    ).json()
    views, _ = truth(first + second)
    totals = {u: sum(b.values()) for u, b in views.items()}
    assert any(r["url"] in totals for r in top["rows"]), "our busiest pages rank among the top 100 of the window"
    assert top_problems(top["rows"], totals, 100) == []


def test_with_cassandra_stopped_the_api_never_answers_wrongly(settings, stack, prefix, traffic):
    """...and the speed layer rides the outage out: what arrived meanwhile is counted once it is back."""
    marker = completeness.latest(settings)
    assert marker is not None
    assert traffic, "the first test of this module sends the traffic this one reads"
    views, _ = truth(traffic)
    busiest = max(views, key=lambda u: sum(views[u].values()))
    start, end = window(traffic)
    cassandra = Stack(settings, ["cassandra"])
    url = f"{prefix}/"
    speed_pid = next(s.pid for s in stack.status() if s.name == "speed-layer")
    try:
        cassandra.down()
        during = mixed_workload(settings, f"{prefix}-outage", 2_500, 25)
        earliest: dict[int, int] = {}
        for r in during:
            earliest[r.partition] = min(earliest.get(r.partition, r.offset), r.offset)
        wait_for(
            lambda: any(planned_offsets(settings).get(p, 0) > o for p, o in earliest.items()),
            "the speed layer to start a micro-batch with records sent during the outage",
            timeout_s=120,
        )
        resp = merged(settings, busiest, start, end)
        assert resp.status_code == 503, resp.text
        assert unavailable_component(resp.json()) == "cassandra", resp.text
        # The partial answer is exactly the batch part: the truth of what was ingested before the
        # cutoff it names, nothing from the speed layer.
        partial = merged(settings, busiest, start, end, partial="true")
        assert partial.status_code == 200, partial.text
        body = partial.json()
        assert body["provenance"]["complete"] is False and body["provenance"]["unavailable"] == ["cassandra"]
        assert all(b["speed"] == 0 and b["value"] == b["batch"] for b in body["series"]), body["series"]
        expected = batch_part(traffic, busiest, epoch(body["provenance"]["cutoff"]) * 1000)
        assert expected, "the batch views hold part of the traffic"
        assert {epoch(b["bucket"]): b["value"] for b in body["series"] if b["value"]} == expected
        health = httpx.get(f"{api(settings)}/health", timeout=60).json()
        assert health["components"]["cassandra"]["state"] == "down"
    finally:
        Stack(settings).up()
    assert merged(settings, url, "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z").status_code == 200
    wait_exact(settings, during)
    assert next(s.pid for s in stack.status() if s.name == "speed-layer") == speed_pid, (
        "the speed layer kept running through the outage (not restarted by `up`)"
    )
