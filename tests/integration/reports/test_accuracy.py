"""Accuracy reports on the real stack: the figures of the reports over the scenario's window
(tests/integration/reports/conftest.py) checked against what was sent, computed here independently:
the clean workload is exact, duplicates beyond the window show exactly their overcount, and the
whole window is reported.
"""

from __future__ import annotations

import json
import time
from collections import Counter

from definitions.events import parse_time, validate
from definitions.view_loading import load_views
from definitions.views import GRANULARITIES
from ingest.generator import SentRecord
from ingest.truth import distinct_events
from tests.support.accuracy_scenario import HOUR

URL_VIEWS = ("page_views", "top_pages")  # additive views keyed by url


def iso(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


# --- what the sent records imply, computed here -------------------------------------------------


def recount_cells(settings, resent: list[SentRecord]) -> Counter:
    """{(view, granularity, key, event bucket ISO, ingest bucket ISO): copies} the speed layer counts
    again: every first re-send of a page view (each event was archived once, long ago)."""
    out: Counter = Counter()
    bucket_s = settings.ingest_bucket_s
    for r in resent:
        event = json.loads(r.value)
        if event["event_type"] != "page_view":
            continue
        t = int(parse_time(event["event_time"]).timestamp())
        ingest = r.ingest_time_ms // 1000 // bucket_s * bucket_s
        for view in URL_VIEWS:
            for granularity, size in GRANULARITIES.items():
                out[(view, granularity, (event["url"],), iso(t // size * size), iso(ingest))] += 1
    return out


def show(title: str, report: dict) -> None:
    """The report's headline figures on stdout (pytest -rP shows them)."""
    print(
        f"{title}: window {report['window']['start']} – {report['window']['end']}, version {report['version']}, ok {report['ok']}"
    )
    for name, s in report["summary"].items():
        causes = ", ".join(f"{c} {v:g}" for c, v in s["causes"].items() if v or c == "late_events")
        hll = f", HLL within 3× bound {s['hll_within_3x_bound']}" if "hll_within_3x_bound" in s else ""
        print(
            f"  {name}/{s['granularity']}: {s['cells']} cells, exact {s['exact_share']}, after duplicates "
            f"{s['exact_share_after_duplicates']}, drift {s['drift']:g}, max |err| {s['max_abs_error']:g}; {causes}{hll}"
        )


def differences(report: dict, view: str) -> Counter:
    doc = report["views"][view]
    assert doc["differences_total"] == len(doc["differences"])
    return Counter(
        {
            (view, d["granularity"], tuple(d["key"]), d["event_bucket"], d["ingest_bucket"]): d["diff"]
            for d in doc["differences"]
        }
    )


# --- tests ------------------------------------------------------------------------------------------


def test_a_clean_workload_is_exact_and_late_events_cause_no_error(scenario):
    report = scenario["clean_report"]
    show("clean workload (its own URLs)", report)
    clean = scenario["clean"]
    kinds = Counter(r.kind for r in clean)
    assert kinds["late"] > 100 and kinds["duplicate"] > 20, kinds
    events = [e for e in distinct_events(clean) if e["event_type"] == "page_view"]
    late_events = [e for e in events if e["ingest_time_ms"] - e["event_time"] > HOUR * 1000]
    assert late_events

    for name in URL_VIEWS:
        for granularity, f in report["views"][name]["granularities"].items():
            assert f["cells"] > 0
            assert f["exact_share"] == 1.0, (name, granularity, f["worst_cells"])
            assert f["drift"] == 0 and f["max_abs_error"] == 0
            assert all(c["cells"] == 0 and c["amount"] == 0 for c in f["causes"].values()), f["causes"]
            # the report's batch side is the truth computed here from what was sent
            assert f["batch_total"] == f["speed_total"] == len(events)
            assert f["duplicate_copies_within_window"] > 0, "generator duplicates were in the window, and cost nothing"
            assert f["late"]["cells"] > 0 and f["late"]["records"] == len(late_events)
            assert f["late"]["error"] == 0 and f["late"]["cells_exact_after_duplicates"] == f["late"]["cells"]
        summary = report["summary"][name]
        assert summary["ok"] and summary["exact_share"] == 1.0 and summary["causes"]["late_events"] == 0

    visitors = report["views"]["unique_visitors"]["granularities"]
    for granularity, f in visitors.items():
        assert f["cells"] > 0
        assert f["causes"]["duplicates_beyond_window"]["cells"] == 0
        for cause in ("accepted_by_one_layer", "late_events", "unexplained"):
            assert f["causes"][cause]["cells"] == 0, (granularity, cause, f["worst_cells"])
        assert f["hll"]["within_3x"] == 1.0
    assert report["summary"]["page_views_by_country_device"]["cells"] == 0, "filtered to the prefix's URLs"
    assert report["ok"], report["problems"]


def test_duplicates_beyond_the_window_show_exactly_their_overcount(settings, scenario):
    report = scenario["dup_report"]
    show(f"{len(scenario['resent'])} re-sent records, beyond the window (their URLs)", report)
    expected = recount_cells(settings, scenario["resent"])
    assert expected, "page views were re-sent"
    # the immediate second re-send of one event is within the window: the speed layer drops it
    assert scenario["again"][0].event_id == scenario["resent"][0].event_id
    resent_page_views = sum(1 for r in scenario["resent"] if json.loads(r.value)["event_type"] == "page_view")
    late_resends = sum(
        1
        for r in scenario["resent"]
        if r.ingest_time_ms - validate(r.value, r.ingest_time_ms)["event_time"] > HOUR * 1000
    )
    assert late_resends >= 1, "some re-sent events are late ones"

    for name in URL_VIEWS:
        got = differences(report, name)
        want = Counter({k: v for k, v in expected.items() if k[0] == name})
        assert got == want, f"{name}: report {sorted(got.items())[:5]} … expected {sorted(want.items())[:5]} …"
        for d in report["views"][name]["differences"]:
            assert d["causes"] == {"duplicates_beyond_window": d["diff"]}, d
        for granularity, f in report["views"][name]["granularities"].items():
            assert f["drift"] == resent_page_views
            assert f["causes"]["duplicates_beyond_window"]["amount"] == resent_page_views
            assert f["exact_share_after_duplicates"] == 1.0, "after the recounts, speed equals batch exactly"
            for cause in ("accepted_by_one_layer", "sketch_approximation", "late_events", "unexplained"):
                assert f["causes"][cause] == {"cells": 0, "amount": 0.0}, (name, granularity, cause)
            assert f["beyond_window_candidates_not_recounted"] == 0
        summary = report["summary"][name]
        assert summary["drift"] == summary["causes"]["duplicates_beyond_window"] == resent_page_views
        assert summary["causes"]["late_events"] == 0 and summary["ok"]

    for granularity, f in report["views"]["unique_visitors"]["granularities"].items():
        assert 0 <= f["causes"]["duplicates_beyond_window"]["amount"] <= resent_page_views
        for cause in ("accepted_by_one_layer", "late_events", "unexplained"):
            assert f["causes"][cause]["cells"] == 0, (granularity, cause, f["worst_cells"])
    assert report["inputs"]["duplicate_copies_beyond_window"] >= len(scenario["resent"])
    assert report["inputs"]["duplicate_copies_within_window"] >= 1
    assert report["ok"], report["problems"]


def test_the_whole_window_is_reported(settings, scenario):
    report = scenario["full"]
    show("the whole window", report)
    print("  inputs:", {k: v for k, v in report["inputs"].items() if k != "beyond_window_gap_s"})
    assert report["window"] == {
        "start": iso(scenario["previous"] // 1000),
        "end": iso(scenario["cutoff"] // 1000),
        "start_ms": scenario["previous"],
        "end_ms": scenario["cutoff"],
    }
    assert report["version"] == scenario["result"].version and report["run_id"] == scenario["result"].run_id
    assert report["speed_layer"]["caught_up"] is True
    assert set(report["summary"]) == set(load_views(settings).names())
    for name, summary in report["summary"].items():
        assert summary["cells"] > 0, name
        assert {"exact_share", "drift", "causes"} <= set(summary)
    resent_page_views = sum(1 for r in scenario["resent"] if json.loads(r.value)["event_type"] == "page_view")
    assert report["summary"]["page_views"]["causes"]["duplicates_beyond_window"] >= resent_page_views
    assert report["inputs"]["master_records_in_window"] >= len(scenario["clean"]) * 0.9
