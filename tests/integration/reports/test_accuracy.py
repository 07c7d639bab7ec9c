"""Accuracy reports on the real stack: speed layer versus batch layer over a real batch run's window.

One scenario (module fixture) feeds the window with
- a clean workload under its own URL prefix: late events, duplicates re-sent within seconds (inside
  the speed layer's de-duplication window), invalid records — everything the design says must
  cause no difference;
- re-sends of the exact bytes of valid records archived long ago (more than twice the speed
  layer's de-duplication window, so its de-duplication state is gone for sure): duplicates beyond
  the window, which the speed layer counts again and the batch does not. One of them is re-sent
  twice in a row: the second copy is within the window of the first re-send and counts for neither.
Then a real batch run (batch_layer.job.run_batch) moves the cutoff past all of it and the report
over [previous cutoff, new cutoff) is checked against what was sent, computed here independently.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections import Counter

import httpx
import pytest

from batch_layer.job import CutoffError, choose_cutoff, run_batch
from definitions.events import parse_time, validate
from definitions.settings import REPO_ROOT
from definitions.views import GRANULARITIES, load_views
from ingest.generator import GeneratorConfig, SentRecord
from ingest.truth import distinct_events
from reports import build, read, storage
from reports.attribute import attribute
from reports.cells import BatchCell, Cell
from reports.render import render_html
from stores.batch_views import VersionStore
from stores.webhdfs import WebHdfs
from tests.support.events import send, wait_archived, wait_cutoff_past

HOUR = 3_600
ARTIFACTS = REPO_ROOT / "test-artifacts"
URL_VIEWS = ("page_views", "top_pages")  # additive views keyed by url


def iso(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


# --- the scenario ---------------------------------------------------------------------------------


def old_records(settings, spark, min_age_s: float, seed: int) -> list[tuple[int, int]]:
    """Kafka positions of valid records archived more than `min_age_s` ago, each the only copy of its
    event: ordinary page views, page views that were late already, and a few other event types."""
    from pyspark.sql import functions as F

    from stores.master import read_master

    master = read_master(spark, settings)
    single = master.groupBy("event_id").count().where("count = 1").select("event_id")
    old = (
        master.where(F.col("ingest_time") < F.timestamp_millis(F.lit(int((time.time() - min_age_s) * 1000))))
        .join(single, "event_id", "left_semi")
        .withColumn("late", (F.unix_seconds("ingest_time") - F.unix_seconds("event_time")) > HOUR)
        .withColumn("pick", F.hash("event_id", F.lit(seed)))
    )
    picks = []
    for where, n in (
        ("event_type = 'page_view' AND NOT late", 16),
        ("event_type = 'page_view' AND late", 8),
        ("event_type != 'page_view'", 6),
    ):
        picks += [
            (r.kafka_partition, r.kafka_offset)
            for r in old.where(where).orderBy("pick").limit(n).select("kafka_partition", "kafka_offset").collect()
        ]
    return picks


def raw_records(settings, positions: list[tuple[int, int]]) -> list:
    """The Kafka records (key and exact value bytes) at the given positions."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=settings.kafka.bootstrap,
        enable_auto_commit=False,
        max_poll_records=1,
        client_id="lambda-test-resend",
    )
    out = []
    try:
        for partition, offset in positions:
            tp = TopicPartition(settings.kafka.events_topic, partition)
            consumer.assign([tp])
            consumer.seek(tp, offset)
            deadline = time.monotonic() + 30
            found = None
            while found is None and time.monotonic() < deadline:
                for msg in consumer.poll(timeout_ms=1000).get(tp, []):
                    if msg.offset == offset:
                        found = msg
            assert found is not None, f"record {partition}/{offset} not found in Kafka"
            out.append(found)
    finally:
        consumer.close()
    return out


def resend(settings, messages: list) -> list[SentRecord]:
    """Send the exact bytes again (same key, same value); what Kafka stamped them with."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap, acks="all", client_id="lambda-test-resend")
    try:
        futures = [(m, producer.send(settings.kafka.events_topic, key=m.key, value=m.value)) for m in messages]
        producer.flush()
        sent = []
        for m, future in futures:
            md = future.get(timeout=30)
            sent.append(
                SentRecord(
                    "resend", json.loads(m.value)["event_id"], md.partition, md.offset, md.timestamp, m.value.decode()
                )
            )
        return sent
    finally:
        producer.close()


def wait_for_old_records(settings, spark, min_age_s: float, seed: int) -> list[tuple[int, int]]:
    """Old enough records; on a fresh stack, sends some and waits until they are old enough (slow)."""
    positions = old_records(settings, spark, min_age_s, seed)
    if len(positions) >= 20:
        return positions
    seeded = send(
        settings,
        GeneratorConfig(
            seed=seed,
            count=400,
            pages=20,
            url_prefix=f"/acc-seed-{seed}",
            late_fraction=0.3,
            late_min_s=2 * HOUR,
            late_max_s=5 * HOUR,
        ),
    )
    wait_archived(settings, seeded)
    time.sleep(max(0.0, max(r.ingest_time_ms for r in seeded) / 1000 + min_age_s + 5 - time.time()))
    return old_records(settings, spark, min_age_s, seed)


def batch_window(settings, spark, sent: list[SentRecord]):
    """Wait until the master dataset is complete past the ingest bucket of the newest record, choose
    that cutoff, wait until the speed layer has committed everything before it, read its rows,
    then run the real batch at that cutoff. (cutoff, BatchResult, realtime snapshot)."""
    for attempt in range(3):
        wait_cutoff_past(settings, sent)
        cutoff = choose_cutoff(settings, None, VersionStore(settings).pointer())
        speed = read.wait_for_speed_layer(settings, cutoff, timeout_s=240)
        assert speed["caught_up"], f"the speed layer did not reach the cutoff: {speed}"
        snapshot = read.read_realtime(settings, 0, cutoff)
        try:
            return cutoff, run_batch(settings, cutoff_ms=cutoff, spark=spark), snapshot
        except CutoffError:  # another run moved serving past this cutoff meanwhile: plan again
            if attempt == 2:
                raise


@pytest.fixture(scope="module")
def scenario(settings, stack, spark):
    seed = int(time.time())
    prefix = f"/acc-{uuid.uuid4().hex[:8]}"
    pointer = VersionStore(settings).pointer()
    previous = pointer.cutoff_ms if pointer is not None else 0
    window_s = settings.speed.dedupe_window_s
    positions = wait_for_old_records(settings, spark, 2 * window_s + 120, seed)
    assert len(positions) >= 20, "the master dataset holds too few old records to re-send"
    originals = raw_records(settings, positions)

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
        # the whole window, rows read by build_report itself (after waiting for the speed layer)
        "full": report(realtime=None),
        "clean_report": report(lambda view, key: "url" in view.keys and key[view.keys.index("url")].startswith(prefix)),
        "dup_report": report(lambda view, key: "url" in view.keys and key[view.keys.index("url")] in resent_urls),
    }


def only_keys(comparison: build.Comparison, keep) -> build.Comparison:
    """The comparison with only the cells whose key `keep(view, key values)` accepts (before any
    figure is computed from them)."""
    views = {v.name: v for v in comparison.views}
    cells = {
        name: [c for c in cells if keep(views[name], tuple(json.loads(c.key)))]
        for name, cells in comparison.cells.items()
    }
    return dataclasses.replace(comparison, cells=cells)


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


def test_attribution_rules():
    """The attribution of one cell's difference, case by case (no stack needed)."""
    from definitions.views import PAGE_VIEWS, UNIQUE_VISITORS

    def cell(view, speed, present=True, **batch):
        c = Cell(view.name, "minute", '["/x"]', 0, 0, speed, present, BatchCell(**batch))
        attribute(view, c)
        return c.parts, c.not_recounted

    # additive: duplicates beyond the window explain exactly their recounts; the rest is named
    assert cell(PAGE_VIEWS, 12, batch=10, expected=12, first_records=10, recounts=2) == (
        {"duplicates_beyond_window": 2},
        0,
    )
    assert cell(PAGE_VIEWS, 11, batch=10, expected=12, first_records=10, recounts=2) == (
        {"duplicates_beyond_window": 1},
        1,
    )
    assert cell(PAGE_VIEWS, 15, batch=10, expected=12, first_records=10, recounts=2) == (
        {"duplicates_beyond_window": 2, "unexplained": 3},
        0,
    )
    assert cell(PAGE_VIEWS, 9, batch=10, expected=10, first_records=10, late_records=4) == ({"late_events": -1}, 0)
    assert cell(PAGE_VIEWS, 0, present=False, batch=3, expected=3, first_records=3) == (
        {"accepted_by_one_layer": -3},
        0,
    )
    assert cell(PAGE_VIEWS, 4, batch=0, expected=0) == ({"accepted_by_one_layer": 4}, 0)
    assert cell(PAGE_VIEWS, 10, batch=10, expected=10, first_records=10, late_records=10) == ({}, 0)
    # distinct: the sketch's error within 3× the bound, beyond it named
    parts, _ = cell(UNIQUE_VISITORS, 1010.0, batch=1000, expected=1000, first_records=1000)
    assert parts == {"sketch_approximation": 10.0}
    parts, _ = cell(UNIQUE_VISITORS, 1100.0, batch=1000, expected=1000, first_records=1000)
    assert parts == {"unexplained": 100.0}
    # candidates the speed layer still de-duplicated (its state outlives the window a little): named, not an error
    parts, not_recounted = cell(UNIQUE_VISITORS, 1000.2, batch=1000, expected=1300, first_records=1000, recounts=300)
    assert parts == {"sketch_approximation": pytest.approx(0.2)} and not_recounted == 300
    parts, _ = cell(UNIQUE_VISITORS, 1290.0, batch=1000, expected=1300, first_records=1000, recounts=300)
    assert parts == {"duplicates_beyond_window": 300, "sketch_approximation": -10.0}


def test_the_report_is_stored_locally_and_on_hdfs_and_served(settings, scenario):
    report = scenario["full"]
    html = render_html(report)
    paths = storage.store_report(settings, report, html)
    assert json.loads(open(paths["json"]).read())["id"] == report["id"]
    assert open(paths["html"]).read() == html
    with WebHdfs(settings) as fs:
        assert json.loads(fs.read(f"{storage.HDFS_DIR}/{report['id']}.json"))["id"] == report["id"]
        assert fs.read(f"{storage.HDFS_DIR}/{report['id']}.html").decode() == html
    assert report["id"] in [r.report["id"] for r in storage.list_reports(settings, 20)]
    assert storage.read_report(settings, report["id"]) == json.loads(json.dumps(report, default=str))
    assert storage.read_report_html(settings, report["id"]) == html
    api = f"http://{settings.api.host}:{settings.api.port}/api/v1/reports"
    listed = httpx.get(api, timeout=30).json()["reports"]
    assert report["id"] in [r["id"] for r in listed]
    assert httpx.get(f"{api}/{report['id']}", timeout=30).json()["summary"] == json.loads(json.dumps(report["summary"]))
    page = httpx.get(f"{api}/{report['id']}/html", timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")


def test_the_html_report_renders_in_chromium(settings, scenario, browser):
    report = scenario["full"]
    html = render_html(report)
    assert "://" not in html and "<script" not in html.lower() and "<link" not in html.lower(), "self-contained"
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors, requests = [], []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("request", lambda req: requests.append(req.url))
    page.set_content(html, wait_until="load")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
    assert not errors, errors
    assert not [u for u in requests if not u.startswith(("about:", "data:"))], requests
    views = load_views(settings).names()
    for name in views:
        section = page.locator(f"section#view-{name}")
        assert section.count() == 1
        assert section.locator("svg").count() >= 3, f"{name}: error histogram, scatter plot, drift over time"
    assert page.locator("svg[aria-label='unique_visitors HLL relative error']").count() == 1
    assert page.locator("svg[aria-label='cells per cause']").count() == 1
    # matplotlib draws a scatter plot's points in the group named after the chart: one <path> each,
    # or, for many points, one <use> each of a marker defined once
    points = "svg g[id^='scatter-points-'] > path, svg g[id^='scatter-points-'] use"
    assert page.locator(points).count() > 10, "the scatter plots have points"
    assert page.get_by_text("measured 0").count() >= len(views), "late events shown as a measured zero"
    assert page.locator("section#view-page_views").get_by_text("duplicates beyond the window").count() >= 1
    assert (ARTIFACTS / "report.png").stat().st_size > 50_000
