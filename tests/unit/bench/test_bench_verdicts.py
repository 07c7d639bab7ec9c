"""A benchmark never reports a failure as a figure: a rate step whose producer did not send its
load (or whose sends failed) is not "sustained", and the API load shows the requests hey scheduled
that are not in its CSV (which leaves timeouts and transport errors out) as its shortfall."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts import each other as files
    yield lambda name: importlib.import_module(name)
    for name in (
        "rate_ladder",
        "api_load",
        "run_all",
        "replay_throughput",
        "speed_lag",
        "speed_report",
        "dedupe_state_cost",
        "speed_aggregation_cost",
        "idle_footprint",
        "native_producer",
    ):
        sys.modules.pop(name, None)


def test_a_rate_step_that_was_not_offered_its_load_is_not_sustained(bench):
    ladder = bench("rate_ladder")
    assert ladder.offer_shortfalls(6_000, SimpleNamespace(rate=6_010.0, failed=0)) == []
    assert "36,000 sends failed" in ladder.offer_shortfalls(6_000, SimpleNamespace(rate=6_000.0, failed=36_000))[0]
    short = ladder.offer_shortfalls(6_000, SimpleNamespace(rate=0.0, failed=0))
    assert short and "offered 0 records/s" in short[0]
    assert ladder.offer_shortfalls(6_000, None) == ["the producer gave no report"]


def test_the_console_producers_records_are_valid_events_each_with_an_id_of_its_own(bench):
    """The speed layer counts every record of a --native rate step: none is invalid, and none is a
    copy of another (of the same step, or of another step's), though their bodies repeat."""
    from definitions.events import verdict

    native = bench("native_producer")
    base = native.base_records(50, seed=3, url_prefix="/bench-rate-t")
    sent = [native.unique_record(base, tag, n) for tag in (1, 2) for n in range(120)]
    events = [verdict(r, ingest_time_ms=None) for r in sent]
    assert [reason for _, reason in events if reason] == []
    assert len({e["event_id"] for e, _ in events}) == len(sent)
    assert {e["url"] for e, _ in events} == {e["url"] for e, _ in (verdict(r) for r in base)}


def test_api_load_counts_requests_hey_scheduled_that_got_no_answer(bench, monkeypatch):
    load = bench("api_load")
    # 10 connections at 5/s for 20 s schedule 1,000 requests (one tick each may fall at the end).
    assert load.scheduled(5.0, 10, 20) == 990
    answered = [(0.002, 200)] * 600 + [(0.002, 503)] * 10  # 380 timed out or were refused

    def fake_hey(urls, rate, workers, duration_s, groups=1):
        return answered, load.scheduled(rate / workers, workers, duration_s)

    monkeypatch.setattr(load, "hey", fake_hey)
    result = load.measure("http://127.0.0.1:1", "page_views", ["/x"], 50, 10, 20, 0)
    assert result["shortfall"] == 990 - 610 and result["errors"] == 10, result
    assert result["rate_achieved"] == 30.0, "only answers with status 200 count as served"
    assert " 380" in load.report([result], 20).splitlines()[-1], "the shortfall is printed"


def test_a_suite_run_keeps_the_previous_runs_figures_beside_its_own(bench, tmp_path):
    """results.md had this run's figures only: the run before was overwritten."""
    import json
    import shutil

    run_all = bench("run_all")
    shutil.copy(BENCH / "results" / "results.json", tmp_path / "results.json")
    before = json.loads((tmp_path / "results.json").read_text())
    previous = run_all.previous_results(tmp_path)
    assert previous == before
    assert json.loads((tmp_path / "results.previous.json").read_text()) == before
    assert not (tmp_path / "results.json").exists(), "this run writes its own"
    (tmp_path / "results.json").write_text('{"an older suite": true}')
    assert run_all.previous_results(tmp_path) is None, "one that cannot be rendered is not kept as the figures before"
    assert run_all.previous_results(tmp_path / "none") is None


def test_the_replay_benchmark_runs_a_command_lambdactl_accepts(bench, monkeypatch):
    """It ran `lambdactl replay page_views --from ...`, which lambdactl refuses (--view is required)."""
    from lambdactl.cli import build_parser

    replay = bench("replay_throughput")
    ran = []

    class Done:
        returncode = 0

        def __init__(self, argv, **_):
            ran.append(argv)

        def communicate(self, timeout=None):
            return '{"records": 1}\n', ""

    monkeypatch.setattr(replay.subprocess, "Popen", Done)
    monkeypatch.setattr(replay, "records_since", lambda settings, from_ms: 10)
    monkeypatch.setattr(replay.time, "monotonic", lambda: 0.0)
    try:
        replay.replay_runs(None, "page_views", 1, 1)
    except KeyError:  # the fake summary lacks the figures: the command is what is checked
        pass
    argv = ran[0]
    assert argv[1:3] == ["-m", "lambdactl.cli"]
    parsed = build_parser().parse_args(argv[3:])
    assert parsed.view == "page_views" and parsed.json


def test_rate_steps_of_two_runs_at_one_rate_send_different_events(bench):
    """The speed layer holds an event id until its watermark passes the id's ingest time + window,
    and its watermark stands still while nothing arrives: a second run sending the ids of the
    first would measure only de-duplication (every record a copy), not the platform's work."""
    from ingest.generator import ClickstreamGenerator

    ladder = bench("rate_ladder")
    ids = {
        run: [r.event_id for r in ClickstreamGenerator(ladder.step_config(run, 6_000, 50)).records() if r.event_id]
        for run in ("1796380000-11", "1796380300-12")
    }
    first, second = ids.values()
    assert len(first) >= 40 and not set(first) & set(second)
    assert ladder.step_config("1796380000-11", 8_000, 50).seed != ladder.step_config("1796380000-11", 6_000, 50).seed


def test_a_step_says_where_its_batches_time_went_per_thousand_rows(bench):
    ladder = bench("rate_ladder")
    dedupe = {"operator": "transformWithStateExec", "updates_ms": 300, "removals_ms": 0, "commit_ms": 40}
    batches = [
        {"input_rows": 2_000, "duration_ms": {"addBatch": 900, "walCommit": 60}, "state_by_operator": [dedupe]},
        {"input_rows": 8_000, "duration_ms": {"addBatch": 3_100, "walCommit": 40}, "state_by_operator": [dedupe]},
        {"input_rows": 0, "duration_ms": {"addBatch": 500}},  # an idle batch's fixed cost counts too
    ]
    got = ladder.time_breakdown(batches)
    assert got["rows"] == 10_000 and got["batches"] == 3
    assert got["wall_ms"] == {"addBatch": pytest.approx(450.0), "walCommit": pytest.approx(10.0)}
    assert got["state_task_ms"]["transformWithStateExec"] == {
        "updates_ms": pytest.approx(60.0),
        "removals_ms": 0,
        "commit_ms": pytest.approx(8.0),
    }
    assert ladder.time_breakdown([{"input_rows": 0, "duration_ms": {"addBatch": 500}}]) is None


def test_a_speed_result_names_the_de_duplication_operator_that_ran(bench, monkeypatch):
    """The operator is the checkpoint's, which can differ from the setting: only the running speed
    layer's progress file says which one a figure was measured with."""
    lag = bench("speed_lag")
    monkeypatch.setattr(
        lag,
        "read_local_progress",
        lambda settings, job: {"dedupe_operator": "within-watermark-scan", "dedupe_window_s": 600, "queries": {}},
    )
    assert lag.speed_dedupe(None) == {"operator": "within-watermark-scan", "window_s": 600}
    monkeypatch.setattr(lag, "read_local_progress", lambda settings, job: (_ for _ in ()).throw(RuntimeError("gone")))
    assert lag.speed_dedupe(None) == {"operator": None, "window_s": None}

    text = bench("speed_report").report(
        {"dedupe": {"operator": "first-copy-timers", "window_s": 120}, "load_average": [1.0]}
    )
    assert "Speed-layer de-duplication: first-copy-timers, window 120 s" in text
    assert "Speed-layer de-duplication: not known" in bench("speed_report").report(
        {"dedupe": {"operator": None, "window_s": None}, "load_average": [1.0]}
    )


def test_the_dedupe_jump_is_timed_on_the_micro_batch_that_forgot_the_ids(bench, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["dedupe_state_cost.py"])
    cost = bench("dedupe_state_cost")
    grow = [{"held": n, "held_before": n - 10, "removed": 0, "batch_ms": 900, "operator_ms": 300} for n in (10, 20, 30)]
    jumped = {"held": 5, "held_before": 30, "removed": 30, "batch_ms": 40_000, "operator_ms": 39_000}
    before, jump = cost.jump_of([*grow, jumped, {**grow[0], "held": 9}])
    assert before == grow, "the medians leave the jump and what follows it out"
    assert jump == {"held_before": 30, "removed": 30, "batch_ms": 40_000, "operator_ms": 39_000}
    assert cost.jump_of(grow) == (grow, None)


def test_the_aggregation_cost_leaves_the_warm_up_third_out_and_times_the_speed_layers_options(bench):
    cost = bench("speed_aggregation_cost")
    # The first third (JVM warm-up, an empty state) is slow; the median comes from the rest.
    batches = [(60_000, 9_000), (60_000, 8_000), (60_000, 2_000), (60_000, 2_100), (60_000, 1_900), (60_000, 2_050)]
    assert cost.median_batch_ms(batches) == 2_025
    assert cost.median_batch_ms([]) is None
    # The two setups differ in the option the speed layer sets, and only there.
    from speed_layer.job import AGGREGATION_OPTIONS

    assert AGGREGATION_OPTIONS.keys() == cost.SPARK_DEFAULTS.keys()
    assert AGGREGATION_OPTIONS != cost.SPARK_DEFAULTS
    # A query per view: each reads every event, so the slowest query's median is the figure.
    fast = [(60_000, 1_000)] * 3
    assert cost.slowest_median_ms([batches, fast]) == 2_025
    assert cost.slowest_median_ms([fast, []]) is None, "a query that finished no micro-batch gives no figure"
    (one, per_view) = cost.COMPARISONS["queries"].values()
    assert (one[2], per_view[2]) == (False, True) and one[:2] == per_view[:2], "they differ in the queries only"


def test_the_idle_footprint_reports_the_speed_layers_micro_batches_by_id(bench):
    """Each micro-batch counts once however often its progress was read; removals and state rows
    come from the progress file's own fields, the state rows and memory from the last batch by id."""
    footprint = bench("idle_footprint")
    seen = {
        7: {"batch_ms": 900, "state_ms": {"removals": 600}, "state_rows": 10, "state_bytes": 2048},
        5: {"batch_ms": 500, "state_ms": {"removals": 10}, "state_rows": 99},
        6: {"batch_ms": 700, "state_ms": None, "state_rows": 0},
    }
    assert footprint.micro_batches(seen) == {
        "count": 3,
        "batch_ms_median": 700,
        "removals_ms_median": 10,
        "state_rows_last": 10,
        "state_bytes_last": 2048,
    }
    assert footprint.micro_batches({}) is None


def test_the_footprint_under_a_trickle_sends_that_rate_for_the_window_with_fresh_ids(bench, monkeypatch):
    footprint = bench("idle_footprint")
    started = []
    monkeypatch.setattr(footprint.subprocess, "Popen", lambda argv, **_kw: started.append(argv) or argv)
    assert footprint.trickle(0.0, 120) is None and started == []
    footprint.trickle(20.0, 120)
    footprint.trickle(20.0, 120)
    first, second = started
    assert first[1:] == ["generate", "--count", "2400", "--rate", "20", "--span", "0", "--seed", first[-1]]
    assert first[-1] != second[-1], "a second run's events would be copies of the first's, dropped as duplicates"


def test_a_trickle_that_could_not_send_gives_no_figures(bench, monkeypatch):
    """Otherwise a generator that failed at once (Kafka down, bad settings) would print idle figures as a trickle's."""
    footprint = bench("idle_footprint")

    class Failed:
        returncode = 2

        def poll(self):
            return 2

        def terminate(self):
            pass

        def wait(self):
            return 2

    monkeypatch.setattr(footprint, "trees", dict)
    monkeypatch.setattr(footprint.subprocess, "Popen", lambda *_a, **_kw: Failed())
    with pytest.raises(SystemExit, match="exited with 2"):
        footprint.measure(0.01, 20.0)


def test_the_footprint_splits_a_jvms_cpu_by_thread_kind(bench):
    """Threads of one kind (numbered pool members) add up under one name; a thread that started
    during the window counts from zero, one that ended is not seen; the shares are of one core."""
    footprint = bench("idle_footprint")
    assert footprint.thread_kind("C2 CompilerThre") == "C2 CompilerThre"
    assert footprint.thread_kind("Executor task launch worker for task 12.0 in stage 3.0 (TID 40)") == (
        "Executor task launch worker for task N.N in stage N.N (TID N)"
    )
    before = {1: ("C2 CompilerThre", 10.0), 2: ("C1 CompilerThre", 4.0), 3: ("GC Thread#0", 1.0)}
    after = {
        1: ("C2 CompilerThre", 16.0),
        2: ("C1 CompilerThre", 5.0),
        4: ("GC Thread#1", 2.0),
        5: ("stream execution thread for speed-views", 3.0),
    }
    split = footprint.thread_split(before, after, elapsed_s=10.0)
    assert split == {
        "C2 CompilerThre": 60.0,
        "stream execution thread for speed-views": 30.0,
        "GC Thread#N": 20.0,
        "C1 CompilerThre": 10.0,
    }
    assert list(split) == sorted(split, key=split.__getitem__, reverse=True), "largest first"
    assert footprint.thread_split(before, {}, elapsed_s=10.0) == {}
