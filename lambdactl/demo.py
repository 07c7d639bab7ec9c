"""`lambdactl demo`: the whole story on generated data.

Starts the stack, streams a realistic clickstream (late, duplicate and invalid events included),
shows merged answers growing from the speed layer, triggers a batch recomputation through
Airflow, and shows the answers staying exact while their provenance moves from speed to batch.
Ends with where to look: the dashboard, the Airflow UI, the accuracy report. Cleans up nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

import httpx

from definitions.section import browser_url
from definitions.settings import Settings
from ingest.generator import GeneratorConfig, produce, read_sent
from ingest.truth import distinct_events

log = logging.getLogger("lambdactl.demo")


def speed_line(speed: dict) -> str:
    """The speed layer's progress (from GET /api/v1/status) in words and units."""
    if not speed.get("running"):
        return "not running yet (no progress reported)"
    rate, behind, fresh = speed.get("input_rows_per_s"), speed.get("records_behind"), speed.get("freshness_s")
    return ", ".join(
        [
            f"{rate:,.0f} records/s in" if rate is not None else "input rate not measured yet",
            f"{behind:,} records behind Kafka" if behind is not None else "backlog not measured yet",
            f"last micro-batch {fresh:,.0f} s ago" if fresh is not None else "no micro-batch finished yet",
        ]
    )


RUN_DEADLINE_S = 1_800.0  # the demo's DAG run (a batch of its records): minutes, on this machine


def _say(message: str) -> None:
    log.info("%s", message)


def _api(settings: Settings) -> str:
    return browser_url(settings.api.host, settings.api.port, "")


def _hourly_window(events: list[dict]) -> tuple[str, str]:
    first = min(e["event_time"] for e in events) // 1000 // 3600 * 3600
    last = (max(e["event_time"] for e in events) // 1000 // 3600 + 1) * 3600
    fmt = lambda s: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(s))  # noqa: E731
    return fmt(first), fmt(last)


def _answer(settings: Settings, url: str, start: str, end: str) -> dict:
    for _attempt in range(5):
        resp = httpx.get(
            f"{_api(settings)}/api/v1/views/page_views",
            params={"url": url, "granularity": "hour", "start": start, "end": end},
            timeout=30,
        )
        if resp.status_code != 503:
            break
        _say(f"    the API says a store is unavailable ({resp.json()['detail']}); asking again")
        time.sleep(3)
    resp.raise_for_status()
    body = resp.json()
    batch = sum(b["batch"] for b in body["series"])
    speed = sum(b["speed"] for b in body["series"])
    return {
        "total": body["total"],
        "batch": batch,
        "speed": speed,
        "version": body["provenance"]["batch_version"],
        "cutoff": body["provenance"]["cutoff"],
    }


def _show(settings: Settings, urls: list[str], truth: Counter, start: str, end: str, label: str) -> bool:
    exact = True
    _say(label)
    for url in urls:
        a = _answer(settings, url, start, end)
        ok = a["total"] == truth[url]
        exact &= ok
        _say(
            f"  {url:<44} merged {a['total']:>6,} = batch {a['batch']:>6,} + speed {a['speed']:>6,}   "
            f"truth {truth[url]:>6,} {'✓ exact' if ok else '… catching up'}"
        )
    return exact


def run_demo(settings: Settings, count: int = 20_000, rate: float = 1_000.0) -> int:
    from infra.stack import Stack
    from stores.airflow import AirflowClient, base_url

    started = time.monotonic()
    stamp = time.strftime("%Y%m%dT%H%M%S")
    # The demo's site lives under its own path, so its answers can be checked against its own truth
    # however much other traffic the stack has seen. Checked before the stack is started.
    try:
        config = GeneratorConfig(
            seed=int(time.time()),
            count=count,
            rate=rate,
            late_fraction=0.1,
            late_min_s=3_600,
            late_max_s=36 * 3_600,
            duplicate_fraction=0.03,
            invalid_fraction=0.02,
            url_prefix=f"/demo-{stamp}",
        )
        if count < 1:
            raise ValueError(f"count must be 1 or more, got {count}")
    except ValueError as exc:
        _say(f"demo refused: {exc}")
        return 2
    _say("1/6 bringing the whole stack up (Kafka, HDFS, HBase, Cassandra, archiver, speed layer, API, Airflow)")
    Stack(settings).up(on_progress=lambda m: _say(f"    {m}"))

    demo_dir = settings.state_dir / "demo"
    demo_dir.mkdir(parents=True, exist_ok=True)
    events_path = demo_dir / f"sent-{stamp}.jsonl"
    _say(
        f"2/6 streaming {count:,} clickstream records at {rate:,.0f}/s: 10 % hours late, 3 % re-sent duplicates, "
        f"2 % invalid (what was sent: {events_path})"
    )
    report_box: dict = {}

    def send() -> None:
        with open(events_path, "w") as handle:
            report_box["report"] = produce(settings, config, handle, progress_every=max(1_000, count // 5))

    # A daemon: Ctrl-C ends the demo, not only its main thread (the sends stop with the process).
    sender = threading.Thread(target=send, name="demo-generator", daemon=True)
    sender.start()

    _say("3/6 merged answers while events arrive (speed layer part grows; the batch part is the previous version's)")
    while sender.is_alive():
        time.sleep(8)
        status = httpx.get(f"{_api(settings)}/api/v1/status", timeout=30).json()
        _say(f"    speed layer: {speed_line(status.get('speed') or {})}")
    sender.join()
    report = report_box["report"]
    _say(
        f"    sent {report.sent:,} records in {report.seconds:.0f}s ({report.rate:,.0f}/s): "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(report.by_kind.items()))
    )

    sent = read_sent(events_path)
    events = distinct_events(sent, settings.events)
    truth = Counter(e["url"] for e in events if e["event_type"] == "page_view")
    urls = [u for u, _ in truth.most_common(4)]
    start, end = _hourly_window(events)
    deadline = time.monotonic() + 300
    while not _show(settings, urls, truth, start, end, "    merged page views of the busiest pages (whole window):"):
        if time.monotonic() > deadline:
            _say("    the speed layer has not caught up after 5 minutes: see `lambdactl status`")
            return 1
        time.sleep(10)

    newest = max(r.ingest_time_ms for r in sent)
    step = settings.ingest_bucket_s * 1000
    _say(f"4/6 waiting until the master dataset is complete past the next {settings.ingest_bucket_s}s ingest bucket")
    from stores import completeness

    deadline = time.monotonic() + settings.ingest_bucket_s + 600
    while True:
        marker = completeness.latest(settings)
        covered = marker.complete_before_ms if marker else None
        if covered is not None and covered - covered % step > newest:
            break
        if time.monotonic() > deadline:
            _say("    the master dataset is not complete past the demo's records: see `lambdactl status` (archiver)")
            return 1
        time.sleep(5)
    _say("5/6 triggering lambda_batch_recompute in Airflow (wait → recompute → verify → swap → report → clean)")
    client = AirflowClient(settings)
    try:
        client.unpause(settings.airflow.dag_id)
        run_id = client.trigger(settings.airflow.dag_id, {"mode": "next_cutoff", "cutoff": "", "views": []})
        _say(f"    run {run_id}: {base_url(settings)}/dags/{settings.airflow.dag_id}/runs/{run_id}")
        seen: dict[str, str] = {}
        deadline = time.monotonic() + RUN_DEADLINE_S
        while True:
            run = client.run(settings.airflow.dag_id, run_id)
            for ti in client.task_instances(settings.airflow.dag_id, run_id):
                if ti["state"] and seen.get(ti["task_id"]) != ti["state"]:
                    seen[ti["task_id"]] = ti["state"]
                    _say(f"    {ti['task_id']}: {ti['state']}")
            if run["state"] in ("success", "failed"):
                break
            if time.monotonic() > deadline:
                _say(f"    the batch run has not ended after {RUN_DEADLINE_S / 60:.0f} minutes: see the Airflow UI")
                return 1
            time.sleep(5)
    finally:
        client.close()
    if run["state"] != "success":
        _say(f"    the batch run failed: see the Airflow UI at {base_url(settings)}")
        return 1

    exact = _show(
        settings,
        urls,
        truth,
        start,
        end,
        "6/6 the same answers after the batch run: still exact, now from the batch layer",
    )
    reports = httpx.get(f"{_api(settings)}/api/v1/reports", timeout=30).json()["reports"]
    _say("")
    _say(f"done in {time.monotonic() - started:.0f}s. Where to look:")
    _say(f"  dashboard        {_api(settings)}/")
    _say(f"  query API docs   {_api(settings)}/docs")
    _say(f"  Airflow UI       {base_url(settings)}/  (user {settings.airflow.admin_user})")
    if reports:
        _say(f"  accuracy report  {_api(settings)}{reports[0]['html']}")
    _say(f"  what was sent    {events_path}")
    _say("  the stack keeps running: `lambdactl status`, `lambdactl down` to stop it")
    return 0 if exact else 1
