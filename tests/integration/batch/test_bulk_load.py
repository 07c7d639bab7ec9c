"""The batch layer's two loads on the real stack: a run whose views reach HBase as HFiles (batch.load
= "bulk", the default) or as puts holds exactly what the ground truth from Kafka says, and a bulk
run leaves no HFile folder behind."""

from __future__ import annotations

import json
import os

import pytest
from datasketches import hll_sketch

from definitions.view_loading import load_views
from ingest.generator import GeneratorConfig
from stores import batch_layout as layout
from stores.batch_views import VersionStore
from tests.support.cli import env
from tests.support.events import fresh_seed, send, wait_cutoff_past
from tests.support.hbase_read import read_table
from tests.support.truth import kafka_events, view_truth


@pytest.fixture(scope="module")
def workload(settings, stack):
    """Duplicates, late and invalid events, archived and past a cutoff."""
    sent = send(
        settings,
        GeneratorConfig(
            seed=fresh_seed(),
            count=2_000,
            late_fraction=0.15,
            late_min_s=3_600,
            late_max_s=2 * 86_400,
            duplicate_fraction=0.05,
            invalid_fraction=0.03,
        ),
    )
    wait_cutoff_past(settings, sent, timeout_s=240 + settings.ingest_bucket_s)
    return sent


@pytest.fixture(scope="module", params=["bulk", "puts"])
def load_run(request, settings, workload):
    """`lambdactl batch --force --no-swap` in its own process (a fresh JVM) with each batch.load:
    the load, the run's version and cutoff, and its log."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "lambdactl.cli", "batch", "--force", "--no-swap", "--no-report", "--json"],
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(env(settings), LAMBDA_BATCH__LOAD=request.param),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return request.param, result, done.stderr


def test_every_loaded_view_equals_ground_truth(settings, load_run):
    load, result, log = load_run
    assert ("HFiles written, loading them" in log) == (load == "bulk"), f"the run loaded by {load}"
    version = result["version"]
    run = VersionStore(settings).runs()[version]
    assert run["state"] == "verified"
    events = kafka_events(settings, result["cutoff_ms"])
    assert run["stats"]["events"] == len(events)
    registry = load_views(settings)
    assert set(run["views"]) == set(registry.names())
    for name in run["views"]:
        view = registry[name]
        stored = read_table(settings, layout.table_name(view, version), view)
        for granularity in view.granularities:
            truth = view_truth(name, events, granularity)
            got = stored.get(granularity, {})
            assert {k: v for k, (v, _) in got.items()} == truth, f"{name}/{granularity}"
            if view.aggregation == "distinct":
                for key, (exact, sketch) in got.items():
                    assert sketch is not None, (name, key)
                    estimate = hll_sketch.deserialize(sketch).get_estimate()
                    assert abs(estimate - exact) <= max(1.0, 0.05 * exact), (key, exact, estimate)


def test_no_hfile_folder_is_left(settings, load_run):
    _, result, _ = load_run
    folder = settings.state_dir / "run" / "bulk-load"
    left = [p.name for p in folder.iterdir()] if folder.is_dir() else []
    assert not [n for n in left if f"_v{result['version']}-" in n], left


REFUSAL = """
import os
from batch_layer.job import run_batch
from definitions.settings import get_settings
from definitions.spark import spark_session
from stores.batch_bulk_load import BulkLoadUnavailable

settings = get_settings()
spark = spark_session(settings, "lambda-tests-plain", {})  # no bulk load class path
print("PID", os.getpid(), flush=True)
try:
    run_batch(settings, force=True, spark=spark, swap=False)
except BulkLoadUnavailable as e:
    print("REFUSED", e, flush=True)
"""


def test_a_session_without_the_bulk_load_is_refused_before_any_work(settings, stack):
    """A session started without the bulk load's class path (in a process of its own: this one's
    session may hold it) is refused before a version is allocated or a run recorded."""
    import subprocess
    import sys

    store = VersionStore(settings)
    before = store.runs()
    done = subprocess.run(
        [sys.executable, "-c", REFUSAL],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(env(settings), LAMBDA_BATCH__LOAD="bulk"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "REFUSED" in done.stdout and "session_options" in done.stdout, done.stdout
    pid = int(done.stdout.split("PID ")[1].split()[0])
    mine = [v for v, r in store.runs().items() if v not in before and r.get("pid") == pid]
    assert not mine, "no run was recorded"


def test_a_bulk_run_killed_while_loading_leaves_its_folder_the_next_run_removes(settings, workload, tmp_path):
    """kill -9 of a batch run (and its Spark driver) while a load's HFile folder exists: the folder
    (with what the executors had written into it) stays behind, its lock held by nobody; the next
    bulk run removes it and verifies all the same."""
    import signal
    import subprocess
    import sys
    import time

    folders = settings.state_dir / "run" / "bulk-load"
    before = set(folders.glob("*.lock")) if folders.is_dir() else set()
    # One view: a load of its own is all the kill needs, and the next run's verification all it checks.
    command = [
        *(sys.executable, "-m", "lambdactl.cli", "batch", "--force", "--no-swap", "--no-report", "--json"),
        *("--views", "page_views"),
    ]
    with open(tmp_path / "killed.log", "w") as log:
        killed = subprocess.Popen(
            command, stdout=log, stderr=log, env=dict(env(settings), LAMBDA_BATCH__LOAD="bulk"), start_new_session=True
        )
        deadline, locks = time.monotonic() + 600, set()
        while not locks and killed.poll() is None and time.monotonic() < deadline:
            new = (set(folders.glob("*.lock")) if folders.is_dir() else set()) - before
            locks = {lock for lock in new if lock.with_name(lock.name.removesuffix(".lock")).is_dir()}
            time.sleep(0.05)
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=60)
    assert locks, "the run started a load: " + (tmp_path / "killed.log").read_text()[-2000:]
    for lock in locks:  # a killed load cannot clean up
        assert lock.exists() and lock.with_name(lock.name.removesuffix(".lock")).is_dir(), lock

    done = subprocess.run(
        command, capture_output=True, text=True, timeout=900, env=dict(env(settings), LAMBDA_BATCH__LOAD="bulk")
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for lock in locks:
        assert not lock.exists() and not lock.with_name(lock.name.removesuffix(".lock")).exists(), lock
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert VersionStore(settings).runs()[result["version"]]["state"] == "verified"
