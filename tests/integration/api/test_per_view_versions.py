"""Per-view batch versions, end to end through the running API on the real stack.

A full batch run, then runs that recompute one view at a time — unique_visitors three times (more
runs than `batch.keep_versions`, so retention has versions to drop), then each other built-in view —
with new traffic before each run (sent right after the previous swap, so the checks also cover
records only the speed layer has counted). After every run, and again after the realtime clean-up the DAG
runs after it, every merged answer equals the ground truth of all the traffic sent so far, and no
answer is a 5xx. Then two runs that read the same pointer: the one that swaps second fails clearly
and changes nothing.

The stack is shared with tests that kill and restart the API: a request that cannot connect is
asked again once the supervisor has it back (an answer that arrives is always checked)."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from batch_layer.job import run_batch, swap_version
from ingest.generator import SentRecord
from stores.batch_views import PointerMoved, VersionStore
from stores.clients import hbase_connection
from tests.integration.api.test_end_to_end import (
    api,
    epoch,
    merged,
    mismatches,
    top_problems,
    truth,
    wait_exact,
    window,
)
from tests.support.cli import lambdactl
from tests.support.events import mixed_workload, wait_cutoff_past

# The views each run recomputes: None is a full run.
STEPS: list[list[str] | None] = [
    None,
    ["unique_visitors"],
    ["unique_visitors"],
    ["unique_visitors"],
    ["page_views"],
    ["top_pages"],
    ["page_views_by_country_device"],
]


def problems(settings, sent: list[SentRecord]) -> list[str]:
    """Every way the API's merged answers differ from the truth of `sent` (empty: all exact)."""
    out = mismatches(settings, sent)  # page_views: every URL's series and total
    views, visitors = truth(sent)
    start, end = window(sent)
    for url, buckets in visitors.items():
        resp = merged(settings, url, start, end, view="unique_visitors")
        if resp.status_code != 200:
            out.append(f"unique_visitors {url}: HTTP {resp.status_code} {resp.text[:200]}")
            continue
        for b in resp.json()["series"]:
            expected = len(buckets.get(epoch(b["bucket"]), ()))
            if b["exact"] and b["value"] != expected:
                out.append(f"unique_visitors {url} {b['bucket']}: {b['value']} (exact), truth {expected}")
            elif not b["exact"] and abs(b["value"] - expected) > max(1.0, 0.05 * expected):
                out.append(f"unique_visitors {url} {b['bucket']}: estimate {b['value']}, truth {expected}")
    top = httpx.get(
        f"{api(settings)}/api/v1/views/top_pages",
        params={"granularity": "hour", "start": start, "end": end, "limit": 100},
        timeout=30,
    )
    if top.status_code != 200:
        out.append(f"top_pages: HTTP {top.status_code} {top.text[:200]}")
    else:
        totals = {u: sum(b.values()) for u, b in views.items()}
        out += [f"top_pages: {p}" for p in top_problems(top.json()["rows"], totals, 100)]
    other = httpx.get(
        f"{api(settings)}/api/v1/views/page_views_by_country_device",
        params={"country": "DE", "device": "mobile", "granularity": "hour", "start": start, "end": end},
        timeout=30,
    )
    if other.status_code != 200:
        out.append(f"page_views_by_country_device: HTTP {other.status_code} {other.text[:200]}")
    return out


def through_restarts(fn, *args, timeout_s: float = 120):
    """`fn(*args)`, asked again while the API cannot be reached (restarted by another test)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn(*args)
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def batch(settings, spark, sent: list[SentRecord], views: list[str] | None):
    """A run past every record of `sent`. The stack is shared: another run may swap while this one
    computes, and then this one loses the compare-and-set; it is run again on top of the new pointer."""
    for _ in range(3):
        wait_cutoff_past(settings, sent)
        try:
            return run_batch(settings, views=views, spark=spark)
        except PointerMoved:
            continue
    raise AssertionError("three runs in a row lost the pointer to other writers")


def tables_present(settings) -> set[str]:
    conn = hbase_connection(settings)
    try:
        return {t.decode() for t in conn.tables()}
    finally:
        conn.close()


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"/pv-{uuid.uuid4().hex[:8]}"


def test_partial_runs_of_each_view_keep_every_answer_exact(settings, stack, spark, prefix):
    sent = mixed_workload(settings, prefix, 1_500, 20)
    through_restarts(wait_exact, settings, sent)  # the speed layer has counted the new traffic
    for step, views in enumerate(STEPS):
        what = f"step {step} ({'full run' if views is None else 'run of ' + ', '.join(views)})"
        result = batch(settings, spark, sent, views)
        assert not result.skipped, what
        pointer = VersionStore(settings).pointer()
        for name in views or []:
            assert pointer.entry(name).version >= result.version, f"{what}: {name} serves version {result.version}"
        if step + 1 < len(STEPS):
            # The next run's traffic goes out now: its ingest bucket closes while this step checks
            # and cleans up (the run waits for that), and the checks cover records above this run's
            # cutoff, which only the speed layer has counted.
            sent += mixed_workload(settings, prefix, 1_500, 20)
            through_restarts(wait_exact, settings, sent)
        assert through_restarts(problems, settings, sent) == [], f"{what}, right after the swap"
        # No query runs during the clean-up (the checks come after it): the shortest settle the
        # settings allow; test_pointer_cache_swap.py proves the settle with queries running.
        settle = {"LAMBDA_BATCH__CLEANUP_SETTLE_S": str(settings.api.pointer_cache_s + 5)}
        cleaned = lambdactl(settings, "clean-realtime", "--json", extra_env=settle)
        assert cleaned.returncode == 0, cleaned.stderr[-2000:]
        assert through_restarts(problems, settings, sent) == [], f"{what}, after the realtime clean-up"
        named = set(VersionStore(settings).pointer().views.values())
        assert named <= tables_present(settings), f"{what}: the pointer names dropped tables"


def test_of_two_runs_that_read_the_same_pointer_the_second_swap_fails_and_changes_nothing(
    settings, stack, spark, prefix
):
    for _ in range(3):  # the shared stack: another writer may move the pointer between our two runs
        first = run_batch(settings, views=["page_views"], force=True, spark=spark, swap=False)
        second = run_batch(settings, views=["page_views"], force=True, spark=spark, swap=False)
        try:
            swap_version(settings, second.version)  # the manual run swaps first ...
        except PointerMoved:
            continue
        break
    else:
        raise AssertionError("three attempts lost the pointer to other writers")
    store = VersionStore(settings)
    before = store.pointer()
    done = lambdactl(settings, "batch", "--swap", str(first.version))  # ... the DAG's swap task second
    assert done.returncode == 2, done.stderr[-2000:]
    assert "the pointer moved since this run read it" in done.stderr
    assert store.pointer() == before, "the losing swap changed nothing"
    assert store.runs()[first.version]["state"] == "verified"
    assert before.entry("page_views").version == second.version
