"""Adding a view to the running platform, then removing it, with `lambdactl views apply`, on the real
stack while a workload runs.

A view module is written to a directory of its own (a plug-in, as a user would add one) and applied:
the speed layer restarts with it, the batch layer computes its history, the API serves it. Throughout,
the other views' answers for traffic sent before (page_views, unique_visitors, top_pages) are checked
again and again: each is a 200 and exact; and the new view is seen building, in the API's list and
in `lambdactl status`, before it serves. After the apply, its answers equal the truth for all the
history sent before it existed and for the traffic sent while it was being added. Undeclared, it is
retired (so says `lambdactl status`); applied, it is gone: no route, no pointer entry, no realtime row,
no batch table.
"""

from __future__ import annotations

import json
import textwrap
import threading
import uuid
from collections import defaultdict

import httpx
import pytest

from definitions.settings_store import load
from ingest.generator import SentRecord
from ingest.truth import distinct_events
from stores.registry import version_store
from tests.integration.api.test_end_to_end import HOUR, api, epoch, mismatches, wait_exact, window
from tests.integration.api.test_per_view_versions import problems
from tests.integration.speed.test_replay import rows_named
from tests.support.cli import lambdactl, restore_views_args
from tests.support.events import mixed_workload
from tests.support.polling import wait_for


def clicks_truth(sent: list[SentRecord]) -> dict[str, dict[int, int]]:
    out: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for e in distinct_events(sent):
        if e["event_type"] == "click":
            out[e["url"]][e["event_time"] // 1000 // HOUR * HOUR] += 1
    return out


def clicks_problems(settings, view: str, sent: list[SentRecord]) -> list[str]:
    start, end = window(sent)
    out = []
    for url, buckets in clicks_truth(sent).items():
        resp = httpx.get(
            f"{api(settings)}/api/v1/views/{view}",
            params={"url": url, "granularity": "hour", "start": start, "end": end},
            timeout=30,
        )
        if resp.status_code != 200:
            out.append(f"{url}: HTTP {resp.status_code} {resp.text[:200]}")
            continue
        series = {epoch(b["bucket"]): b for b in resp.json()["series"] if b["value"]}
        for bucket in sorted(set(series) | set(buckets)):
            point = series.get(bucket, {"value": 0, "batch": 0, "speed": 0})
            if point["value"] != buckets.get(bucket, 0):
                ingested = sorted(
                    e["ingest_time_ms"]
                    for e in distinct_events(sent)
                    if e["event_type"] == "click"
                    and e["url"] == url
                    and e["event_time"] // 1000 // HOUR * HOUR == bucket
                )
                out.append(
                    f"{url} {bucket}: {point['value']} (batch {point['batch']}, speed {point['speed']}), truth "
                    f"{buckets.get(bucket, 0)} ingested at {ingested}; cutoff {resp.json()['provenance']['cutoff']}"
                )
    return out


def states(settings) -> dict[str, dict]:
    done = lambdactl(settings, "views", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    return {s["name"]: s for s in json.loads(done.stdout)["views"]}


def status_states(settings) -> dict[str, str]:
    """Each view's state as `lambdactl status` shows it."""
    done = lambdactl(settings, "status", "--json")
    body = json.loads(done.stdout)
    assert body["views"] is not None, body["views_error"]
    return {s["name"]: s["state"] for s in body["views"]}


def listed_state(settings, view: str) -> str | None:
    """The view's state in the API's list of views (None: not listed, or no answer)."""
    try:
        resp = httpx.get(f"{api(settings)}/api/v1/views", timeout=10)
    except httpx.TransportError:
        return None
    if resp.status_code != 200:
        return None
    return {v["name"]: v["state"] for v in resp.json()["views"]}.get(view)


@pytest.fixture
def view_module(settings, tmp_path):
    """(module name, directory, view name); the declared views are put back as they were afterwards."""
    before = load().views
    suffix = uuid.uuid4().hex[:8]
    folder = tmp_path / "views"
    folder.mkdir()
    module, view = f"applied_views_{suffix}", f"clicks_{suffix}"
    (folder / f"{module}.py").write_text(
        textwrap.dedent(
            f"""
            from definitions.views import View

            VIEWS = [View(name="{view}", keys=("url",), aggregation="count", where="event_type = 'click'",
                          granularities=("hour", "day"), description="clicks per URL (added while running)")]
            """
        )
    )
    yield module, folder, view
    if load().views != before:
        lambdactl(settings, "views", "apply", *restore_views_args(before))


def test_a_view_added_while_running_is_exact_for_its_history_and_the_others_never_falter(settings, stack, view_module):
    module, folder, view = view_module
    prefix = f"/va-{uuid.uuid4().hex[:8]}"
    before = mixed_workload(settings, prefix, 1_500, 10)
    wait_exact(settings, before)

    wait_for(lambda: not problems(settings, before), "every view exact for the traffic sent before", timeout_s=120)
    stop = threading.Event()
    checked: list[int] = []
    faults: list[str] = []
    during: list[SentRecord] = []
    seen: list[str] = []  # the new view's states in the API's list, in order
    in_status: list[str] = []  # its state in `lambdactl status` while the API lists it building

    def watch() -> None:  # the other views, all through the change
        while not stop.is_set():
            found = problems(settings, before)
            faults.extend(found[:3])
            checked.append(1)
            state = listed_state(settings, view)
            if state is not None and (not seen or seen[-1] != state):
                seen.append(state)
            if state == "building" and not in_status:
                in_status.append(status_states(settings).get(view, "absent"))
            stop.wait(1.0)

    def load_traffic() -> None:  # a workload the whole time, on URLs of its own
        seed = 1
        while not stop.is_set():
            during.extend(mixed_workload(settings, f"{prefix}-live", 200, 10))
            seed += 1
            stop.wait(2.0)

    threads = [threading.Thread(target=watch), threading.Thread(target=load_traffic)]
    for thread in threads:
        thread.start()
    try:
        done = lambdactl(settings, "views", "apply", "--modules", module, "--paths", str(folder))
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert faults == [], f"other views faltered during the change: {faults[:5]}"
    assert len(checked) >= 10, f"only {len(checked)} checks ran during the change"

    state = states(settings)[view]
    assert state["state"] == "serving", state
    assert state["since_ms"] > 0 and state["cutoff_ms"] >= state["since_ms"], state
    listed = {v["name"]: v for v in httpx.get(f"{api(settings)}/api/v1/views", timeout=30).json()["views"]}
    assert listed[view]["state"] == "serving", listed[view]
    assert seen[:1] == ["building"], f"the API listed {view} as {seen} during the apply"
    assert in_status == ["building"], f"`lambdactl status` said {in_status} while the API said building"
    assert status_states(settings)[view] == "serving"

    # All history, and the traffic sent while it was added (the speed layer catches up on the latter).
    everything = before + during
    last: list[str] = []

    def exact() -> bool:
        last[:] = clicks_problems(settings, view, everything)
        return not last

    try:
        wait_for(exact, f"{view} equal to the truth", timeout_s=300, interval_s=1)
    except AssertionError:
        raise AssertionError(
            f"{view} differs from the truth: {last[:5]}; its state {state}; apply said: {done.stderr[-2500:]}"
        ) from None
    assert mismatches(settings, everything) == []

    # No longer declared, it is retired until applied; applied, its route, pointer entry and rows go.
    assert rows_named(settings, view) > 0
    (folder / f"{module}.py").write_text("VIEWS = []\n")  # the user takes it out of the module
    assert states(settings)[view]["state"] == "retired"
    assert status_states(settings)[view] == "retired"
    done = lambdactl(settings, "views", "apply", "--no-modules", "--no-paths")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert httpx.get(f"{api(settings)}/api/v1/views/{view}", params={"url": "/"}, timeout=30).status_code == 404
    pointer = version_store(settings).pointer()
    assert pointer is not None and pointer.entry(view) is None
    assert view not in states(settings)
    assert view not in status_states(settings)
    assert rows_named(settings, view) == 0
    left = [t for t in version_store(settings).tables() if t.startswith(f"{view}_v")]
    assert left == [], f"the apply drops the retired view's batch tables too: {left} are left"
    assert mismatches(settings, everything) == []
