"""An API that reuses its pointer read (api.pointer_cache_s) stays exact across a batch swap and the
realtime clean-up that follows it, as the DAG runs them: answers computed from the previous pointer
still find the realtime rows the swap absorbed, because `lambdactl clean-realtime` waits
batch.cleanup_settle_s after the swap. The API here is in-process (the stack's settings with a
10 s pointer cache, so the window is wide enough to see); the stores, the batch run and the
clean-up are the real ones."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import defaultdict

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from ingest.generator import GeneratorConfig
from ingest.truth import distinct_events
from stores.batch_views import VersionStore
from tests.support.cli import env
from tests.support.events import fresh_seed, send, wait_cutoff_past
from tests.support.polling import wait_for
from tests.support.tripwire_api import LOCAL_URL

HOUR = 3_600
POINTER_CACHE_S = 10.0
SETTLE_S = 16.0


@pytest.fixture
def cached(settings):
    mine = settings.model_copy(
        update={
            "api": settings.api.model_copy(update={"pointer_cache_s": POINTER_CACHE_S}),
            "batch": settings.batch.model_copy(update={"cleanup_settle_s": SETTLE_S}),
        }
    )
    with TestClient(create_app(mine), base_url=LOCAL_URL, raise_server_exceptions=False) as client:
        yield mine, client


def _truth(sent) -> dict[str, dict[int, int]]:
    views: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for e in distinct_events(sent):
        if e["event_type"] == "page_view":
            views[e["url"]][e["event_time"] // 1000 // HOUR * HOUR] += 1
    return {url: dict(b) for url, b in views.items()}


def _answers(client: TestClient, truth: dict[str, dict[int, int]], start: int, end: int) -> dict[str, tuple]:
    """{url: (merged {bucket: value}, batch version)} of every URL of the workload."""
    out = {}
    for url in truth:
        resp = client.get(
            "/api/v1/views/page_views",
            params={"url": url, "granularity": "hour", "start": _iso(start), "end": _iso(end)},
        )
        assert resp.status_code == 200, resp.text
        body = resp.json()
        got = {_epoch(b["bucket"]): b["value"] for b in body["series"] if b["value"]}
        out[url] = (got, body["provenance"]["batch_version"])
    return out


def _iso(s: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(s))


def _epoch(text: str) -> int:
    import calendar

    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))


def test_answers_from_the_previous_pointer_stay_exact_through_swap_and_clean_up(settings, stack, spark, cached, unique):
    from batch_layer.job import run_batch, swap_version

    mine, client = cached
    sent = send(
        settings,
        GeneratorConfig(seed=fresh_seed(), count=600, pages=8, url_prefix=f"/swap-{unique}", late_fraction=0.2),
    )
    truth = _truth(sent)
    times = [e["event_time"] // 1000 for e in distinct_events(sent)]
    start, end = min(times) // HOUR * HOUR, (max(times) // HOUR + 1) * HOUR
    wait_for(
        lambda: all(got == truth[u] for u, (got, _) in _answers(client, truth, start, end).items()),
        "the speed layer to count the workload",
        timeout_s=180,
    )
    wait_cutoff_past(settings, sent)
    result = run_batch(mine, spark=spark, swap=False)  # written and verified; not serving yet
    before = {v for _, v in _answers(client, truth, start, end).values()}  # the pointer read now is reused
    swap_version(mine, result.version)
    assert VersionStore(settings).pointer().version == result.version
    cleanup = subprocess.Popen(
        [sys.executable, "-m", "lambdactl.cli", "clean-realtime"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(
            env(settings),
            LAMBDA_API__POINTER_CACHE_S=str(POINTER_CACHE_S),
            LAMBDA_BATCH__CLEANUP_SETTLE_S=str(SETTLE_S),
        ),
    )
    rounds, versions = 0, set()
    while cleanup.poll() is None:  # while the clean-up waits and deletes: every answer exact
        for url, (got, version) in _answers(client, truth, start, end).items():
            assert got == truth[url], (
                f"{url} during the clean-up: {sorted(got.items())} != {sorted(truth[url].items())}"
            )
            versions.add(version)
        rounds += 1
    output = cleanup.stdout.read() if cleanup.stdout else ""
    assert cleanup.returncode == 0, output
    assert "waiting" in output and "batch.cleanup_settle_s" in output, output
    assert rounds >= 3, output
    assert before - {result.version} <= versions, "answers from the previous pointer were checked during the wait"
    # afterwards: the new version, no speed part left for the workload, still exact
    after = _answers(client, truth, start, end)
    assert all(got == truth[u] and v == result.version for u, (got, v) in after.items()), after
