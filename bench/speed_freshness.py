"""Speed-layer freshness and highest sustained input rate, measured on the running stack.

1. Freshness: the generator sends background traffic into topic `events` (`--fresh-rate`
   records/s for `--fresh-duration` s, URLs under /bench-bg-<run>/); meanwhile a separate
   producer (linger 0) sends a probe page view every `--probe-interval` s, each with its own URL
   /bench-fresh-<run>/<i>. A probe's produce time is the broker's LogAppendTime of its record
   (RecordMetadata.timestamp). Cassandra's `realtime_by_key` (view page_views, granularity
   minute, key = key_text([url])) is polled every `--poll-interval` s for all pending probes in
   one query; freshness = the first poll that sees the probe's count − its produce time.
   p50/p95/p99 over the probes.
2. Highest sustained rate: the generator sends `--rates` records/s (valid events, URLs under
   /bench-rate-<run>/) for `--step-duration` s each. Every second: the lag = Kafka's end offsets
   of `events` − the offsets of the speed layer's last committed micro-batch (read from its
   checkpoint on HDFS), and its progress file (`rows_behind`, input/processed rows/s, batch ms).
   A step is sustained when the lag does not grow: the least-squares trend of the lag just after
   each batch commit, times the step's duration, stays below one trigger interval's worth of
   records, and the backlog is gone within `--drain-timeout` s of the step's end. The ladder stops at the first step that is not sustained.

    .venv/bin/python bench/speed_freshness.py --json /tmp/bench_speed.json

Needs the stack up (`lambdactl up`), speed layer included. The benchmark's events stay in topic
`events` (and so reach the master dataset): their URLs start with /bench-.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from figures import emit, fmt, int_list, percentile  # bench/ itself: the scripts run as files
from speed_report import report  # bench/ itself

from definitions.events import SCHEMA_VERSION, format_time
from definitions.settings import Settings, get_settings
from definitions.views import key_text
from ingest.generator import GeneratorConfig, SendReport, produce
from speed_layer.job import JOB, QUERY
from stores.clients import cassandra_cluster
from stores.progress import read_progress
from stores.realtime import BY_KEY
from stores.webhdfs import WebHdfs

log = logging.getLogger("bench.speed")


def summary(values: list[float]) -> dict:
    return {
        "count": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "min": min(values) if values else None,
        "max": max(values) if values else None,
        "mean": statistics.fmean(values) if values else None,
    }


class Background:
    """The generator in a thread."""

    def __init__(self, settings: Settings, config: GeneratorConfig) -> None:
        self.report: SendReport | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(settings, config), daemon=True, name="bench-generator")

    def _run(self, settings: Settings, config: GeneratorConfig) -> None:
        try:
            self.report = produce(settings, config, None)
        except BaseException as exc:  # reported by the caller
            self.error = exc

    def start(self) -> Background:
        self.thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)
        if self.error is not None:
            raise RuntimeError(f"background producer failed: {self.error!r}") from self.error


# --- lag: Kafka end offsets vs the speed layer's committed offsets ---------------------------------


class LagProbe:
    def __init__(self, settings: Settings) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.settings = settings
        self.topic = settings.kafka.events_topic
        self.consumer = KafkaConsumer(
            bootstrap_servers=settings.kafka.bootstrap, enable_auto_commit=False, client_id="lambda-bench-speed"
        )
        partitions = self.consumer.partitions_for_topic(self.topic) or set(range(settings.kafka.partitions))
        self.partitions = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        self.fs = WebHdfs(settings)
        self.checkpoint = settings.speed.checkpoint_dir.rstrip("/")
        self._last_batch: int | None = None
        self._last_committed = 0

    def end_offsets(self) -> int:
        return sum(self.consumer.end_offsets(self.partitions).values())

    def committed(self) -> tuple[int | None, int]:
        """(batch id, sum of its end offsets) of the speed layer's last committed micro-batch."""
        batches = [int(n) for n in self.fs.list(f"{self.checkpoint}/commits") if n.isdigit()]
        if not batches:
            return None, 0
        last = max(batches)
        if last != self._last_batch:
            raw = self.fs.read(f"{self.checkpoint}/offsets/{last}")
            if raw is None:
                return self._last_batch, self._last_committed
            offsets = json.loads(raw.decode().strip().splitlines()[-1])
            self._last_committed = sum(int(v) for v in offsets.get(self.topic, {}).values())
            self._last_batch = last
        return self._last_batch, self._last_committed

    def sample(self) -> dict:
        end = self.end_offsets()
        batch, committed = self.committed()
        return {"t": time.time(), "end": end, "committed": committed, "batch": batch, "lag": max(0, end - committed)}

    def close(self) -> None:
        self.consumer.close()
        self.fs.close()


def speed_progress(settings: Settings) -> dict | None:
    try:
        return read_progress(settings, JOB).get("queries", {}).get(QUERY)
    except RuntimeError as exc:
        log.warning("speed-layer progress: %s", exc)
        return None


# --- 1. freshness ----------------------------------------------------------------------------------


@dataclass
class Probe:
    index: int
    url: str
    key: str
    sent_s: float  # wall clock just before send()
    appended_ms: int | None = None  # broker LogAppendTime
    acked_s: float | None = None
    visible_s: float | None = None
    error: str | None = None
    extra: dict = field(default_factory=dict)


def probe_event(url: str, user: str) -> bytes:
    event = {
        "event_id": str(uuid.uuid4()),
        "event_time": format_time(datetime.now(UTC)),
        "user_id": user,
        "url": url,
        "event_type": "page_view",
        "referrer": None,
        "country": "US",
        "device": "desktop",
        "schema_version": SCHEMA_VERSION,
    }
    return json.dumps(event, separators=(",", ":")).encode()


def freshness(
    settings: Settings, run: str, rate: float, duration: float, interval: float, poll: float, timeout: float
) -> dict:
    from kafka import KafkaProducer

    cluster = cassandra_cluster(settings, timeout_s=10)
    session = cluster.connect()
    query = session.prepare(
        f"SELECT key, value FROM {settings.cassandra.keyspace}.{BY_KEY} WHERE view_name = 'page_views' AND granularity = 'minute' "
        "AND key IN ?"
    )
    producer = KafkaProducer(
        bootstrap_servers=settings.kafka.bootstrap, client_id="lambda-bench-probe", acks="all", linger_ms=0, retries=5
    )
    background = Background(
        settings,
        GeneratorConfig(
            seed=int(time.time()) % 100_000, count=int(rate * duration), rate=rate, url_prefix=f"/bench-bg-{run}"
        ),
    ).start()
    probes: list[Probe] = []
    user = f"bench-probe-{run}"
    lock = threading.Lock()

    def acked(probe: Probe, metadata) -> None:
        with lock:
            probe.appended_ms = metadata.timestamp
            probe.acked_s = time.time()

    def failed(probe: Probe, exc: Exception) -> None:
        with lock:
            probe.error = repr(exc)

    started = time.monotonic()
    next_probe = started + 1.0  # let the background traffic start first
    last_probe_due = started + duration
    deadline = last_probe_due + timeout
    polls = 0
    next_log = started + 10.0
    try:
        while time.monotonic() < deadline:
            now = time.monotonic()
            if now >= next_probe and now < last_probe_due:
                index = len(probes)
                url = f"/bench-fresh-{run}/{index}"
                probe = Probe(index, url, key_text([url]), time.time())
                future = producer.send(settings.kafka.events_topic, key=user.encode(), value=probe_event(url, user))
                future.add_callback(lambda md, p=probe: acked(p, md))
                future.add_errback(lambda exc, p=probe: failed(p, exc))
                probes.append(probe)
                next_probe += interval
            pending = [p for p in probes if p.visible_s is None and p.error is None]
            if pending:
                rows = session.execute(query, ([p.key for p in pending],))
                seen_s = time.time()
                polls += 1
                counts: dict[str, int] = {}
                for row in rows:
                    counts[row.key] = counts.get(row.key, 0) + row.value
                for p in pending:
                    if counts.get(p.key, 0) >= 1:
                        p.visible_s = seen_s
            elif now >= last_probe_due:
                break
            if now >= next_log:
                visible = [p.visible_s - p.appended_ms / 1000 for p in probes if p.visible_s and p.appended_ms]
                log.info(
                    "freshness: %d probes sent, %d visible (median so far %s s)",
                    len(probes),
                    len(visible),
                    fmt(percentile(visible, 50), 2),
                )
                next_log += 10.0
            time.sleep(max(0.0, poll - (time.monotonic() - now)))
        producer.flush(10)
        background.join(max(10.0, duration))
    finally:
        producer.close(10)
        cluster.shutdown()
    fresh_append = [p.visible_s - p.appended_ms / 1000 for p in probes if p.visible_s and p.appended_ms]
    fresh_send = [p.visible_s - p.sent_s for p in probes if p.visible_s]
    ack = [p.acked_s - p.sent_s for p in probes if p.acked_s]
    bg = background.report
    result = {
        "probes": len(probes),
        "visible": len(fresh_append),
        "not_visible": [p.url for p in probes if p.visible_s is None],
        "send_errors": [p.error for p in probes if p.error],
        "probe_interval_s": interval,
        "poll_interval_s": poll,
        "polls": polls,
        "background_rate_target": rate,
        "background_sent": bg.sent if bg else None,
        "background_rate_achieved": bg.rate if bg else None,
        "duration_s": duration,
        "freshness_from_append_s": summary(fresh_append),
        "freshness_from_send_s": summary(fresh_send),
        "produce_ack_s": summary(ack),
        "samples_s": [round(v, 3) for v in fresh_append],
    }
    return result


# --- 2. sustained rate -----------------------------------------------------------------------------


def least_squares_slope(points: list[tuple[float, float]]) -> float | None:
    if len(points) < 3:
        return None
    try:
        return statistics.linear_regression([t for t, _ in points], [v for _, v in points]).slope
    except statistics.StatisticsError:
        return None


def wait_drained(lag: LagProbe, target_end: int, timeout: float) -> float | None:
    """Seconds until the speed layer has committed everything up to `target_end`; None on timeout."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        _, committed = lag.committed()
        if committed >= target_end:
            return time.monotonic() - started
        time.sleep(0.5)
    return None


def rate_step(settings: Settings, lag: LagProbe, run: str, rate: int, duration: float, drain_timeout: float) -> dict:
    count = int(rate * duration)
    config = GeneratorConfig(seed=rate, count=count, rate=rate, url_prefix=f"/bench-rate-{run}")
    samples, batches = [], {}
    first = lag.sample()
    started = time.time()
    background = Background(settings, config).start()
    while background.thread.is_alive():
        s = lag.sample()
        s["t"] -= started
        samples.append(s)
        progress = speed_progress(settings)
        if progress and progress.get("batch_id") is not None and progress.get("timestamp", "") >= _iso(started):
            batches[progress["batch_id"]] = {
                k: progress.get(k)
                for k in (
                    "timestamp",
                    "input_rows",
                    "input_rows_per_s",
                    "processed_rows_per_s",
                    "batch_ms",
                    "rows_behind",
                )
            }
        background.thread.join(timeout=1.0)
    background.join()
    produce_end = time.time()
    end_at_stop = lag.end_offsets()
    report = background.report
    drained_s = wait_drained(lag, end_at_stop, drain_timeout)
    progress = speed_progress(settings)
    if progress and progress.get("batch_id") is not None and progress.get("timestamp", "") >= _iso(started):
        batches[progress["batch_id"]] = {
            k: progress.get(k)
            for k in ("timestamp", "input_rows", "input_rows_per_s", "processed_rows_per_s", "batch_ms", "rows_behind")
        }
    elapsed = produce_end - started
    offered = report.rate if report else 0.0
    # The lag just after a commit (a trough of the saw-tooth) is what arrived while that batch
    # ran: it stays level when the speed layer keeps up and grows with each batch when it does not
    # (every batch then takes longer than the one before). The step's first commit may close a
    # batch planned before the step began: it is left out.
    commits = [b for a, b in zip(samples, samples[1:]) if b["committed"] != a["committed"]]
    troughs = [s["lag"] for s in commits[1:]]
    tolerance = offered * settings.speed.trigger_s
    reasons = []
    growth = None
    slope = least_squares_slope([(s["t"], s["lag"]) for s in commits[1:]])
    if len(troughs) >= 3 and slope is not None:
        # The trend of the troughs over the step (least squares: one slow batch, a GC pause or a
        # compaction on the shared machine, moves it little; a backlog that builds up moves it
        # with every batch), as the lag it adds over the step's duration.
        growth = round(slope * elapsed)
        if growth > tolerance:
            reasons.append(
                f"lag after commits grew by {growth:,} records over the step (trend; tolerance {tolerance:,.0f})"
            )
    else:
        reasons.append(f"only {len(commits)} batch(es) committed during the {elapsed:.0f}s step")
    if drained_s is None:
        reasons.append(f"backlog not processed within {drain_timeout:.0f}s of the step's end")
    step_batches = list(batches.values())
    processed = [b["processed_rows_per_s"] for b in step_batches if b.get("processed_rows_per_s")]
    inputs = [b["input_rows_per_s"] for b in step_batches if b.get("input_rows_per_s")]
    timed = [b for b in step_batches if b.get("batch_ms") and b.get("input_rows") is not None]
    batch_ms = [b["batch_ms"] for b in timed]
    behind = [b["rows_behind"] for b in step_batches if b.get("rows_behind") is not None]
    # Records committed per second between the first and the last commit seen during the step.
    committed_rate = None
    if len(commits) >= 2 and commits[-1]["t"] > commits[0]["t"]:
        committed_rate = (commits[-1]["committed"] - commits[0]["committed"]) / (commits[-1]["t"] - commits[0]["t"])
    return {
        "target_rate": rate,
        "offered_rate": offered,
        "sent": report.sent if report else 0,
        "failed": report.failed if report else None,
        "produce_s": elapsed,
        "lag_start": first["lag"],
        "lag_end": samples[-1]["lag"] if samples else None,
        "lag_max": max((s["lag"] for s in samples), default=None),
        "lag_after_commits": troughs,
        "lag_after_first_commit": troughs[0] if troughs else None,
        "lag_after_last_commit": troughs[-1] if troughs else None,
        "lag_growth": growth,
        "lag_growth_tolerance": tolerance,
        "lag_slope_per_s": slope,
        "drained_after_s": drained_s,
        "sustained": not reasons,
        "not_sustained_because": reasons,
        "batches": len(step_batches),
        # Spark's processedRowsPerSecond over the step's batches: rows / busy time, and the median.
        "processed_rows_per_s": (sum(b["input_rows"] for b in timed) / (sum(batch_ms) / 1000)) if batch_ms else None,
        "processed_rows_per_s_median": statistics.median(processed) if processed else None,
        "input_rows_per_s_median": statistics.median(inputs) if inputs else None,
        "committed_rows_per_s": committed_rate,
        "batch_ms_median": statistics.median(batch_ms) if batch_ms else None,
        "batch_ms_max": max(batch_ms) if batch_ms else None,
        "rows_behind_max": max(behind) if behind else None,
        "rows_behind_last": behind[-1] if behind else None,
        "batch_samples": [(b["input_rows"], b["batch_ms"]) for b in timed],
        "lag_samples": [(round(s["t"], 1), s["lag"]) for s in samples],
    }


def batch_cost_fit(steps: list[dict]) -> dict | None:
    """Least squares batch_ms = fixed + per_row * rows over every batch seen; 1/per_row bounds the rate."""
    points = [(rows, ms) for s in steps for rows, ms in s.get("batch_samples", []) if rows]
    if len(points) < 3 or len({r for r, _ in points}) < 2:
        return None
    try:
        fit = statistics.linear_regression([r for r, _ in points], [m for _, m in points])
    except statistics.StatisticsError:
        return None
    if fit.slope <= 0:
        return {"batches": len(points), "fixed_ms": fit.intercept, "per_row_ms": fit.slope, "ceiling_rows_per_s": None}
    return {
        "batches": len(points),
        "fixed_ms": fit.intercept,
        "per_row_ms": fit.slope,
        "ceiling_rows_per_s": 1000 / fit.slope,
    }


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def sustained_rates(settings: Settings, run: str, rates: list[int], duration: float, drain_timeout: float) -> dict:
    lag = LagProbe(settings)
    steps = []
    try:
        start_end = lag.end_offsets()
        settle = wait_drained(lag, start_end, drain_timeout)
        if settle is None:
            log.warning("the speed layer is still behind before the first step (lag %d)", lag.sample()["lag"])
        for rate in rates:
            log.info("rate step %d records/s for %.0fs", rate, duration)
            step = rate_step(settings, lag, run, rate, duration, drain_timeout)
            steps.append(step)
            log.info(
                "step %d/s: offered %.0f/s, processed %s/s (Spark), lag after commits %s, drained after %s s: %s",
                rate,
                step["offered_rate"],
                fmt(step["processed_rows_per_s"]),
                step["lag_after_commits"],
                fmt(step["drained_after_s"], 1),
                "sustained" if step["sustained"] else "NOT sustained: " + "; ".join(step["not_sustained_because"]),
            )
            if not step["sustained"]:
                break
    finally:
        lag.close()
    ok = [s for s in steps if s["sustained"]]
    return {
        "batch_cost_fit": batch_cost_fit(steps),
        "rates": rates,
        "step_duration_s": duration,
        "trigger_s": settings.speed.trigger_s,
        "max_offsets_per_trigger": settings.speed.max_offsets_per_trigger,
        "highest_sustained_target_rate": max((s["target_rate"] for s in ok), default=None),
        "highest_sustained_offered_rate": max((s["offered_rate"] for s in ok), default=None),
        "first_unsustained_target_rate": next((s["target_rate"] for s in steps if not s["sustained"]), None),
        "not_run": [r for r in rates if r not in {s["target_rate"] for s in steps}],
        "steps": steps,
    }


# --- main -------------------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--fresh-rate", type=float, default=200.0, help="background records/s during the freshness test"
    )
    parser.add_argument("--fresh-duration", type=float, default=60.0, help="seconds of background traffic and probes")
    parser.add_argument("--probe-interval", type=float, default=0.5)
    parser.add_argument("--poll-interval", type=float, default=0.1)
    parser.add_argument("--probe-timeout", type=float, default=120.0, help="seconds a probe may take to become visible")
    parser.add_argument(
        "--rates", type=int_list, default=int_list("1000,2000,3000,4000,5000,6000"), help="records/s, comma-separated"
    )
    parser.add_argument("--step-duration", type=float, default=60.0)
    parser.add_argument(
        "--drain-timeout", type=float, default=60.0, help="seconds the speed layer may take to catch up after a step"
    )
    parser.add_argument("--skip-freshness", action="store_true")
    parser.add_argument("--skip-rates", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    for noisy in ("kafka", "cassandra", "httpx", "infra"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    settings = get_settings()
    progress = speed_progress(settings)
    if not progress or not progress.get("active"):
        log.error("the speed layer is not running (lambdactl status)")
        return 2

    run = f"{int(time.time())}-{os.getpid()}"
    result: dict = {
        "run": run,
        "trigger_s": settings.speed.trigger_s,
        "ingest_bucket_s": settings.ingest_bucket_s,
        "errors": {},
    }
    loads = [os.getloadavg()[0]]
    status = 0
    if not args.skip_freshness:
        try:
            log.info(
                "freshness: %.0f records/s background for %.0fs, a probe every %.1fs",
                args.fresh_rate,
                args.fresh_duration,
                args.probe_interval,
            )
            result["freshness"] = freshness(
                settings,
                run,
                args.fresh_rate,
                args.fresh_duration,
                args.probe_interval,
                args.poll_interval,
                args.probe_timeout,
            )
        except Exception as exc:
            log.exception("freshness failed")
            result["errors"]["freshness"] = f"{type(exc).__name__}: {exc}"
            status = 1
        loads.append(os.getloadavg()[0])
    if not args.skip_rates:
        try:
            result["rates"] = sustained_rates(settings, run, args.rates, args.step_duration, args.drain_timeout)
        except Exception as exc:
            log.exception("rate steps failed")
            result["errors"]["rates"] = f"{type(exc).__name__}: {exc}"
            status = 1
        loads.append(os.getloadavg()[0])
    result["load_average"] = loads
    emit(result, report(result), args.json)
    return status


if __name__ == "__main__":
    sys.exit(main())
