"""The batch layer on the real stack: exact views in versioned HBase tables, an atomic swap,
a killed run that changes nothing, idempotent reruns, views added by declaration alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime

import httpx
import pytest
from datasketches import hll_sketch

from batch_layer.job import CutoffError, choose_cutoff, run_batch
from definitions.view_loading import load_views
from ingest.generator import GeneratorConfig
from stores import batch_layout as layout
from stores import completeness
from stores.batch_views import VersionStore
from stores.clients import hbase_connection
from stores.pointer import NotCoveredYet, table_version, table_view
from tests.support.events import fresh_seed, send, wait_cutoff_past
from tests.support.hbase_read import read_table
from tests.support.polling import wait_for
from tests.support.truth import kafka_events, view_truth


@pytest.fixture(scope="module")
def bsettings(settings):
    """The stack's settings: cutoffs must fall on the speed layer's ingest-bucket boundaries."""
    return settings


def bucket_s(settings) -> int:
    return settings.ingest_bucket_s


@pytest.fixture(scope="module")
def workload(bsettings, stack):
    """A workload with duplicates and events hours to days late, archived and past a cutoff."""
    sent = send(
        bsettings,
        GeneratorConfig(
            seed=fresh_seed(),
            count=4_000,
            late_fraction=0.15,
            late_min_s=3_600,
            late_max_s=3 * 86_400,
            duplicate_fraction=0.05,
            invalid_fraction=0.03,
        ),
    )
    wait_cutoff_past(bsettings, sent, timeout_s=240 + bucket_s(bsettings))
    return sent


@pytest.fixture(scope="module")
def batch_run(bsettings, workload, spark):
    return run_batch(bsettings, spark=spark)


def test_every_batch_view_equals_ground_truth(bsettings, batch_run):
    pointer = VersionStore(bsettings).pointer()
    assert pointer.version == batch_run.version and pointer.cutoff_ms == batch_run.cutoff_ms
    events = kafka_events(bsettings, pointer.cutoff_ms)
    assert batch_run.events == len(events)
    registry = load_views(bsettings)
    for view in registry:
        table = pointer.views[view.name]
        stored = read_table(bsettings, table, view)
        for granularity in view.granularities:
            truth = view_truth(view.name, events, granularity)
            got = stored.get(granularity, {})
            assert {k: v for k, (v, _) in got.items()} == truth, f"{view.name}/{granularity}"
            if view.aggregation == "distinct":
                for key, (exact, sketch) in got.items():
                    estimate = hll_sketch.deserialize(sketch).get_estimate()
                    assert abs(estimate - exact) <= max(1.0, 0.05 * exact), (key, exact, estimate)


def test_verification_scans_ranges_that_cover_each_table_once(bsettings, batch_run):
    """The run records where each table's verification split its scan; scanning those ranges (in
    threads) counts exactly what one scan of the whole table counts, and what the run wrote."""
    from stores.batch_writer import TableStats, VerificationError, missing_rows, table_stats, verify_table

    run = VersionStore(bsettings).runs()[batch_run.version]
    registry = load_views(bsettings)
    assert len(run["stats"]["splits"]["page_views"]) > 1, run["stats"]["splits"]
    for name, recorded in run["stats"]["tables"].items():
        splits = [bytes.fromhex(key) for key in run["stats"]["splits"][name]]
        table = layout.table_name(name, batch_run.version)
        in_ranges = table_stats(bsettings, table, registry[name], splits)
        assert in_ranges == table_stats(bsettings, table, registry[name]) == TableStats(**recorded), name
        assert not missing_rows(bsettings, table, splits), "every cut is a row the run wrote"
    # A row key the computation sampled but the table lacks (a write that encoded keys otherwise)
    # fails verification even when the figures agree.
    view = registry["page_views"]
    table = layout.table_name(view, batch_run.version)
    recorded = TableStats(**run["stats"]["tables"]["page_views"])
    absent = layout.row_key(view, "minute", ["/no-such-page"], 0)
    with pytest.raises(VerificationError, match="lacks 1 of the"):
        verify_table(bsettings, table, view, recorded, [*bytes_splits(run, "page_views"), absent])


def bytes_splits(run: dict, name: str) -> list[bytes]:
    return [bytes.fromhex(key) for key in run["stats"]["splits"][name]]


def test_version_2_events_are_counted_by_both_layers(bsettings, batch_run):
    """page_views_by_channel over everything Kafka holds: version-1 events as `web` (the view's
    default), version-2 ones by their channel, in the batch part below the cutoff and in the speed
    part above it (fresh traffic of both versions), merged exactly."""
    sent = send(bsettings, GeneratorConfig(seed=fresh_seed(), count=1_500, v1_fraction=0.4))
    versions = {json.loads(r.value)["schema_version"] for r in sent if r.kind == "valid"}
    assert versions == {1, 2}, versions
    cutoff_ms = VersionStore(bsettings).pointer().cutoff_of("page_views_by_channel")
    events = kafka_events(bsettings, cutoff_ms=2**62)
    assert any(e["ingest_time_ms"] >= cutoff_ms and e["channel"] for e in events), "version-2 events after the cutoff"
    days = view_truth("page_views_by_channel", events, "day")
    after = view_truth("page_views_by_channel", [e for e in events if e["ingest_time_ms"] >= cutoff_ms], "day")
    start = datetime.fromtimestamp(min(b for _, b in days), UTC).isoformat().replace("+00:00", "Z")
    end = datetime.fromtimestamp(max(b for _, b in days) + 86_400, UTC).isoformat().replace("+00:00", "Z")
    api = f"http://{bsettings.api.host}:{bsettings.api.port}"
    last: list[str] = []

    def exact() -> bool:
        last.clear()
        for channel in ("web", "app", "api"):
            resp = httpx.get(
                f"{api}/api/v1/views/page_views_by_channel",
                params={"channel": channel, "granularity": "day", "start": start, "end": end},
                timeout=30,
            )
            if resp.status_code != 200:
                last.append(f"{channel}: HTTP {resp.status_code} {resp.text[:200]}")
                continue
            for point in resp.json()["series"]:
                bucket = int(datetime.fromisoformat(point["bucket"].replace("Z", "+00:00")).timestamp())
                want, want_speed = days.get((channel, bucket), 0), after.get((channel, bucket), 0)
                if (point["value"], point["speed"]) != (want, want_speed):
                    last.append(f"{channel} {point['bucket']}: {point} want {want}, speed part {want_speed}")
        return not last

    try:
        wait_for(exact, "page_views_by_channel merged equal to the truth from Kafka", timeout_s=240, interval_s=1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; differences: {last[:6]}") from None
    assert sum(v for (channel, _), v in after.items() if channel == "web") > 0, "the speed part counted web"
    assert sum(v for (channel, _), v in after.items() if channel != "web") > 0, "... and the other channels"


def test_late_and_duplicate_events_were_in_the_workload(workload):
    kinds = {r.kind for r in workload}
    assert {"late", "duplicate"} <= kinds


def test_rerun_of_the_same_cutoff_is_a_no_op(bsettings, batch_run, spark):
    again = run_batch(bsettings, cutoff_ms=batch_run.cutoff_ms, spark=spark)
    assert again.skipped and again.version == batch_run.version
    assert VersionStore(bsettings).pointer().version == batch_run.version


def test_cutoff_not_covered_is_refused(bsettings, batch_run):
    marker = completeness.latest(bsettings)
    step = bucket_s(bsettings) * 1000
    # One bucket past the next one: the archiver cannot cover it between this read and the check.
    uncovered = marker.complete_before_ms - marker.complete_before_ms % step + 2 * step
    for ahead in (uncovered, uncovered + 2 * step):  # the DAG's sensor waits for these
        with pytest.raises(NotCoveredYet, match="not covered"):
            choose_cutoff(bsettings, ahead, VersionStore(bsettings).pointer())
    wait_ms = bsettings.batch.completeness_wait_s * 1000
    # A typo: no sensor waits that long (on the grid, more than the wait after now however far
    # the archiver lags behind the clock).
    far_ms = ((time.time_ns() // 1_000_000 + wait_ms) // step + 2) * step
    with pytest.raises(CutoffError, match=r"more than batch.completeness_wait_s \(3600s\) after now") as far:
        choose_cutoff(bsettings, far_ms, VersionStore(bsettings).pointer())
    assert not isinstance(far.value, NotCoveredYet)
    with pytest.raises(CutoffError, match="boundary"):
        choose_cutoff(bsettings, batch_run.cutoff_ms + 1, None)
    with pytest.raises(CutoffError, match="behind"):
        choose_cutoff(bsettings, batch_run.cutoff_ms - step, VersionStore(bsettings).pointer())


def test_killed_run_leaves_the_pointer_and_answers_unchanged(bsettings, batch_run):
    store = VersionStore(bsettings)
    before = store.pointer()
    snapshot = {name: read_table(bsettings, table, load_views(bsettings)[name]) for name, table in before.views.items()}
    env = dict(os.environ, LAMBDA_INGEST_BUCKET_S=str(bucket_s(bsettings)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "batch_layer.job", "--force"],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    killed_version = None
    while time.monotonic() < deadline and proc.poll() is None:
        writing = [v for v, r in store.runs().items() if r.get("state") == "writing" and r.get("pid") == proc.pid]
        if writing:
            killed_version = writing[0]
            table = layout.table_name("page_views", killed_version)
            conn = hbase_connection(bsettings)
            try:
                has_rows = (
                    table.encode() in conn.tables() and next(iter(conn.table(table).scan(limit=1)), None) is not None
                )
            finally:
                conn.close()
            if has_rows:
                break
        time.sleep(0.5)
    assert proc.poll() is None, f"the batch run ended before it could be killed: {proc.stderr.read()[-2000:]}"
    assert killed_version is not None
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)

    after = store.pointer()
    assert after == before, "a killed run must not move the pointer"
    for name, table in after.views.items():
        assert read_table(bsettings, table, load_views(bsettings)[name]) == snapshot[name]
    # The next retention pass drops the dead run's tables.
    dropped = store.retain(bsettings.batch.keep_versions)
    assert layout.table_name("page_views", killed_version) in dropped


def test_a_view_added_by_declaration_alone_is_computed_and_stored(bsettings, batch_run, spark, tmp_path, monkeypatch):
    module = tmp_path / "team_views.py"
    module.write_text(
        textwrap.dedent("""
        from definitions.views import View
        VIEWS = [View("signups_by_country", keys=("country",), aggregation="count",
                      where="event_type = 'signup'", granularities=("day",))]
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    settings = bsettings.model_copy(update={"views": bsettings.views.model_copy(update={"modules": ["team_views"]})})
    result = run_batch(settings, cutoff_ms=batch_run.cutoff_ms, views=["signups_by_country"], force=True, spark=spark)
    pointer = VersionStore(settings).pointer()
    assert pointer.version == result.version
    assert pointer.views["signups_by_country"] == layout.table_name("signups_by_country", result.version)
    assert pointer.views["page_views"] == layout.table_name("page_views", batch_run.version), "other views keep serving"
    view = load_views(settings)["signups_by_country"]
    stored = read_table(settings, pointer.views["signups_by_country"], view)["day"]
    events = kafka_events(settings, pointer.cutoff_ms)
    truth: dict = {}
    for e in events:
        if e["event_type"] == "signup" and e["country"]:
            key = (e["country"], (e["event_time"] - e["event_time"] % 86_400_000) // 1000)
            truth[key] = truth.get(key, 0) + 1
    assert {k: v for k, (v, _) in stored.items()} == truth and truth


def test_old_versions_are_dropped_beyond_retention(bsettings, batch_run):
    """Per view: the table serving it and its newest served versions (keep_versions in all) stay,
    besides runs still in flight; nothing the pointer names is ever dropped."""
    store = VersionStore(bsettings)
    store.retain(bsettings.batch.keep_versions)
    runs = store.runs()
    pointer = store.pointer()
    conn = hbase_connection(bsettings)
    try:
        tables = {t.decode() for t in conn.tables()}
    finally:
        conn.close()
    assert pointer.tables() <= tables
    in_flight = {v for v, r in runs.items() if r.get("state") in ("writing", "verified")}
    for view in load_views(bsettings).names():
        served = sorted(
            (
                v
                for v, r in runs.items()
                if r.get("state") in ("live", "retired")
                and view in r.get("views", [])
                and v != pointer.entry(view).version
            ),
            reverse=True,
        )
        allowed = {pointer.entry(view).version, *served[: bsettings.batch.keep_versions - 1], *in_flight}
        assert {table_version(t) for t in tables if table_view(t) == view} <= allowed, view


def test_write_verify_and_swap_as_separate_steps(bsettings, batch_run, spark):
    """The steps the Airflow DAG runs one by one: serving only moves at the swap."""
    import json as _json

    from batch_layer.job import swap_version, verify_version

    store = VersionStore(bsettings)
    before = store.pointer()
    cutoff = max(before.cutoff_of(name) for name in load_views(bsettings).names())
    written = run_batch(bsettings, cutoff_ms=cutoff, force=True, spark=spark, swap=False)
    assert store.pointer() == before, "a written, unswapped version does not serve"
    assert set(verify_version(bsettings, written.version)) == set(load_views(bsettings).names())
    done = subprocess.run(
        [sys.executable, "-m", "lambdactl.cli", "batch", "--swap", str(written.version)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, LAMBDA_INGEST_BUCKET_S=str(bucket_s(bsettings))),
    )
    assert done.returncode == 0, done.stderr
    assert _json.loads(done.stdout)["version"] == written.version
    after = store.pointer()
    assert after.version == written.version and after.cutoff_ms == cutoff
    assert {e.version for e in after.entries.values()} == {written.version}, "a full run moves every view"
    with pytest.raises(Exception, match="cannot serve"):
        swap_version(bsettings, written.version + 1000)


def test_a_rerun_at_the_served_cutoff_whose_table_is_gone_computes_it_again(bsettings, batch_run, spark):
    """A served table dropped outside the platform (an operator, a failed restore) made every run at
    the same cutoff "nothing to do" while the view's answers failed: the run computes it again."""
    store = VersionStore(bsettings)
    view = "page_views_by_channel"
    before = store.pointer()
    gone = before.entry(view).table
    conn = hbase_connection(bsettings)
    try:
        conn.delete_table(gone, disable=True)
    finally:
        conn.close()
    try:
        again = run_batch(bsettings, cutoff_ms=before.cutoff_of(view), views=[view], spark=spark)
    finally:  # the stack is shared: never leave the pointer naming a table that is gone
        from stores.batch_writer import missing_tables

        if missing_tables(bsettings, {store.pointer().entry(view).table}):
            run_batch(bsettings, views=[view], force=True, spark=spark)
    assert not again.skipped, "a run over a served table that is gone is no no-op"
    after = store.pointer()
    assert after.entry(view).version == again.version and after.entry(view).table != gone
    assert after.cutoff_of(view) == before.cutoff_of(view)
    conn = hbase_connection(bsettings)
    try:
        assert after.entry(view).table.encode() in conn.tables()
    finally:
        conn.close()
    assert run_batch(bsettings, cutoff_ms=before.cutoff_of(view), views=[view], spark=spark).skipped, "then it is"
