"""The accuracy scenario on the real stack: speed layer versus batch layer over a real batch run's window.

One scenario (a package fixture: built once for every test module of this folder) feeds the window with
- a clean workload under its own URL prefix: late events, duplicates re-sent within seconds (inside
  the speed layer's de-duplication window), invalid records — everything the design says must
  cause no difference;
- re-sends of the exact bytes of valid records archived long ago (more than twice the speed
  layer's de-duplication window, so its de-duplication state is gone for sure): duplicates beyond
  the window, which the speed layer counts again and the batch does not. One of them is re-sent
  twice in a row: the second copy is within the window of the first re-send and counts for neither.
Then a real batch run (batch_layer.job.run_batch) moves the cutoff past all of it; the reports over
[previous cutoff, new cutoff) are what the tests check.
"""

from __future__ import annotations

import json
import uuid

import pytest

from definitions.view_loading import load_views
from ingest.generator import GeneratorConfig
from reports import build, read
from stores.batch_views import VersionStore
from tests.support.accuracy_scenario import (
    HOUR,
    batch_window,
    move_speed_watermark,
    only_keys,
    raw_records,
    resend,
    wait_for_old_records,
)
from tests.support.events import fresh_seed, send


# Package scope, not module scope: the scenario (a workload, waits for old records and for the
# cutoff, a real batch run) is expensive, and the tests that read it live in several modules of
# this package; a module-scoped fixture here would build it once per module.
@pytest.fixture(scope="package")
def scenario(settings, stack, spark):
    seed = fresh_seed()
    prefix = f"/acc-{uuid.uuid4().hex[:8]}"
    pointer = VersionStore(settings).pointer()
    previous = pointer.cutoff_ms if pointer is not None else 0
    window_s = settings.speed.dedupe_window_s
    positions = wait_for_old_records(settings, spark, 2 * window_s + 120, seed)
    assert len(positions) >= 20, "the master dataset holds too few old records to re-send"
    originals = raw_records(settings, positions)
    move_speed_watermark(settings)  # their ids out of the speed layer's de-duplication state

    clean = send(
        settings,
        GeneratorConfig(
            seed=seed,
            count=1_500,
            pages=20,
            users=300,
            url_prefix=prefix,
            late_fraction=0.2,
            late_min_s=2 * HOUR,
            late_max_s=30 * HOUR,
            duplicate_fraction=0.05,
            invalid_fraction=0.03,
        ),
    )
    resent = resend(settings, originals)
    again = resend(settings, originals[:1])  # seconds after the first re-send: within its window
    sent = clean + resent + again
    cutoff, result, snapshot = batch_window(settings, spark, sent)
    assert cutoff > max(r.ingest_time_ms for r in sent) and previous <= min(r.ingest_time_ms for r in sent)

    views = list(load_views(settings))
    batch = read.batch_cells(settings, spark, views, previous, cutoff)
    resent_urls = {json.loads(r.value)["url"] for r in resent}

    def report(keep=None, realtime=snapshot):
        """The report of the window, as build.build_report makes it; with `keep`, of the cells of this
        test's own keys only (the stack's other traffic shares the window)."""
        comparison = build.compare_window(settings, spark, previous, cutoff, realtime=realtime, batch=batch)
        if keep is not None:
            comparison = only_keys(comparison, keep)
        return build.assemble(settings, comparison, result.version, result.run_id)

    return {
        "prefix": prefix,
        "clean": clean,
        "resent": resent,
        "again": again,
        "previous": previous,
        "cutoff": cutoff,
        "result": result,
        "views": views,
        "batch": batch,
        # the whole window, rows read by build_report itself (after waiting for the speed layer)
        "full": report(realtime=None),
        "clean_report": report(lambda view, key: "url" in view.keys and key[view.keys.index("url")].startswith(prefix)),
        "dup_report": report(lambda view, key: "url" in view.keys and key[view.keys.index("url")] in resent_urls),
    }
