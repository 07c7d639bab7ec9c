"""Changing a view's definition on the running platform with `lambdactl views apply`, on the real
stack while a workload runs.

A plug-in view counting clicks is added, then its declaration is edited in place (same name, now
counting add-to-cart and purchase events) and applied again. Throughout, its answers for traffic sent
before are read again and again: each is the exact answer of the old definition, or of the new one,
(or a 409 asking to retry), never a mix, and once one answer came from the new definition no later
one comes from the old: the switch is atomic. page_views stays exact the whole time. Afterwards the
view answers by its new definition for all history and for the traffic sent during the change, and
its old definition is retired: no pointer entry, not maintained by the speed layer, its realtime
rows deleted.

The apply that makes the change is killed (SIGKILL) right after the switch, part-way through its
rounds; a second apply finishes what the first began, and a third one finds nothing to do.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from collections import defaultdict
from pathlib import Path

import httpx

from definitions.settings_store import load
from ingest.generator import SentRecord
from ingest.truth import distinct_events
from stores.checkpoints import read_marker
from stores.registry import version_store
from tests.integration.api.test_end_to_end import HOUR, api, epoch, mismatches, wait_exact, window
from tests.integration.api.test_views_apply import states
from tests.support.cli import env, lambdactl, restore_views_args
from tests.support.events import mixed_workload
from tests.support.polling import wait_for

OLD = ("click",)
NEW = ("add_to_cart", "purchase")


def declare(folder: Path, module: str, view: str, types: tuple[str, ...]) -> None:
    where = "event_type IN (" + ", ".join(f"'{t}'" for t in types) + ")"
    (folder / f"{module}.py").write_text(
        textwrap.dedent(
            f"""
            from definitions.views import View

            VIEWS = [View(name="{view}", keys=("url",), aggregation="count", where="{where}",
                          granularities=("hour", "day"), description="events of {types} per URL")]
            """
        )
    )


def truth_of(sent: list[SentRecord], types: tuple[str, ...]) -> dict[str, dict[int, int]]:
    out: dict[str, dict[int, int]] = {e["url"]: defaultdict(int) for e in distinct_events(sent)}
    for e in distinct_events(sent):
        if e["event_type"] in types:
            out[e["url"]][e["event_time"] // 1000 // HOUR * HOUR] += 1
    return {url: dict(buckets) for url, buckets in out.items()}


def answer(settings, view: str, url: str, sent: list[SentRecord]) -> dict[int, int] | str:
    """The view's hourly answer for `url` over the window of `sent`, or a non-200 answer's status and text."""
    start, end = window(sent)
    resp = httpx.get(
        f"{api(settings)}/api/v1/views/{view}",
        params={"url": url, "granularity": "hour", "start": start, "end": end},
        timeout=30,
    )
    if resp.status_code != 200:
        return f"{resp.status_code} {resp.text[:300]}"
    return {epoch(b["bucket"]): b["value"] for b in resp.json()["series"] if b["value"]}


def answers(settings, view: str, sent: list[SentRecord]) -> dict[str, dict[int, int]] | str:
    """The view's hourly answers for every URL of `sent`, or the first non-200 answer's status and text."""
    out = {}
    for url in sorted({e["url"] for e in distinct_events(sent)}):
        got = answer(settings, view, url, sent)
        if isinstance(got, str):
            return got
        out[url] = got
    return out


def apply_killed_after_switch(settings) -> str:
    """Run `lambdactl views apply` and kill it (SIGKILL) as soon as it says it switched; what it said."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "lambdactl.cli", "views", "apply"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env(settings),
    )
    said: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append(line)
            if "switched to its new definition" in line:
                os.kill(proc.pid, signal.SIGKILL)
                break
    finally:
        proc.kill()
        proc.wait(timeout=60)
    return "".join(said)


def test_a_changed_view_answers_from_its_old_definition_then_switches_atomically(settings, stack, tmp_path):
    declared_before = load().views
    suffix = uuid.uuid4().hex[:8]
    folder = tmp_path / "views"
    folder.mkdir()
    module, view = f"changed_views_{suffix}", f"orders_{suffix}"
    declare(folder, module, view, OLD)
    try:
        added = lambdactl(settings, "views", "apply", "--modules", module, "--paths", str(folder))
        assert added.returncode == 0, added.stdout[-2000:] + added.stderr[-3000:]

        prefix = f"/vc-{suffix}"
        before = mixed_workload(settings, prefix, 1_500, 10)
        old, new = truth_of(before, OLD), truth_of(before, NEW)
        assert old != new
        wait_exact(settings, before)
        wait_for(lambda: answers(settings, view, before) == old, f"{view} exact by its first definition", 300, 1)

        telling = sorted(url for url in old if old[url] != new[url])  # URLs whose answer tells which definition
        assert telling
        declare(folder, module, view, NEW)  # edited in place: same module, same view name
        stop = threading.Event()
        seen: list[str] = []
        faults: list[str] = []
        during: list[SentRecord] = []

        def watch() -> None:
            # One request per URL, in turn: each answer is one definition's (the switch can fall
            # between two requests of a round, never within one), in time order.
            while not stop.is_set():
                for url in telling:
                    got = answer(settings, view, url, before)
                    if got == old[url]:
                        seen.append("old")
                    elif got == new[url]:
                        seen.append("new")
                    elif isinstance(got, str) and got.startswith("409"):
                        seen.append("retry")
                    else:
                        faults.append(
                            f"{view} {url}: neither definition's answer: {str(got)[:300]} "
                            f"(old {old[url]}, new {new[url]})"
                        )
                faults.extend(f"page_views: {m}" for m in mismatches(settings, before)[:3])
                stop.wait(0.5)

        def load_traffic() -> None:
            while not stop.is_set():
                during.extend(mixed_workload(settings, f"{prefix}-live", 200, 10))
                stop.wait(2.0)

        threads = [threading.Thread(target=watch), threading.Thread(target=load_traffic)]
        for thread in threads:
            thread.start()
        try:
            killed = apply_killed_after_switch(settings)
            applied = lambdactl(settings, "views", "apply")  # finishes what the killed one began
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=120)
        assert "switched to its new definition" in killed, killed[-3000:]
        assert applied.returncode == 0, applied.stdout[-2000:] + applied.stderr[-3000:]
        assert faults == [], f"answers faltered during the change: {faults[:5]}"
        assert seen and seen[0] == "old", f"the old definition answered first: {seen[:10]}"
        assert "new" in seen, f"the new definition never answered during the change: {seen[-10:]}"
        switched = seen.index("new")
        assert "old" not in seen[switched:], f"an answer of the old definition after the switch: {seen}"
        assert seen.count("old") >= 5 * len(telling), (
            f"the view did not keep answering while its new definition was built: {seen}"
        )

        # The new definition answers all history and the traffic sent during the change.
        everything = before + during
        wait_for(
            lambda: answers(settings, view, everything) == truth_of(everything, NEW),
            f"{view} exact by its new definition",
            300,
            1,
        )
        pointer = version_store(settings).pointer()
        storage = pointer.aliases.get(view)
        assert storage and storage.startswith(f"{view}__"), pointer.aliases
        assert pointer.entry(storage) is not None and pointer.entry(view) is None, "the old definition is retired"
        assert pointer.retiring == (), f"realtime rows still to delete: {pointer.retiring}"
        marker = read_marker(settings)
        assert storage in marker.views and view not in marker.views, marker.views
        listed = {v["name"]: v for v in httpx.get(f"{api(settings)}/api/v1/views", timeout=30).json()["views"]}
        assert listed[view]["state"] == "serving" and listed[view]["changing"] is None, listed[view]
        assert states(settings)[storage]["state"] == "serving"
        assert mismatches(settings, everything) == []

        again = lambdactl(settings, "views", "apply")  # twice in a row: nothing left to do
        assert again.returncode == 0, again.stderr[-3000:]
        moved = version_store(settings).pointer()
        assert (moved.aliases, moved.retiring) == (pointer.aliases, pointer.retiring), "the pointer stayed"
        assert "switched" not in again.stderr and "retired" not in again.stderr, again.stderr[-2000:]
        assert answers(settings, view, everything) == truth_of(everything, NEW)
    finally:
        if load().views != declared_before:
            restored = lambdactl(settings, "views", "apply", *restore_views_args(declared_before))
            assert restored.returncode == 0, restored.stderr[-2000:]
    pointer = version_store(settings).pointer()
    assert pointer is not None and view not in pointer.aliases, "a removed view's alias goes with it"
