"""Progress of a streaming job's queries: what its health, `lambdactl status` and the API read.

A StreamingQueryListener feeds a ProgressFile: per query its last batch (rates, duration, rows
behind Kafka, observed metrics), running totals of the observed metrics, and whatever a job adds
through hooks (the archiver's completeness marker). It is kept in a JSON file beside the driver
(every batch, for diagnostics on that machine) and published to HDFS (`stack.progress_dir`) at
start, at the end and at most every `stack.progress_publish_s` between: readers anywhere read
HDFS (`read_progress`), not the driver's disk.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from definitions.files import replace_text
from definitions.settings import Settings

if TYPE_CHECKING:
    from stores.webhdfs import WebHdfs

log = logging.getLogger(__name__)

# A hook gets the query progress and returns extra state to keep under its own key (or None).
Hook = Callable[[object], "dict | None"]


def progress_path(settings: Settings, job: str) -> Path:
    return settings.state_dir / "run" / f"{job}.progress.json"


def published_path(settings: Settings, job: str) -> str:
    """Where the job's progress is published on HDFS."""
    return f"{settings.stack.progress_dir.rstrip('/')}/{job}.json"


class HdfsPublisher:
    """Publishes a job's progress document to HDFS over WebHDFS; a failure is logged (once per
    minute at most) and never raised: the job goes on, its health shows the document's age."""

    def __init__(self, settings: Settings, job: str) -> None:
        self.settings = settings
        self.path = published_path(settings, job)
        self.last_error_logged = 0.0
        self.hdfs: WebHdfs | None = None  # one WebHDFS session for every publication; made again after a failure

    def __call__(self, text: str) -> bool:
        """Whether the document was published."""
        from stores.webhdfs import WebHdfs

        try:
            if self.hdfs is None:
                self.hdfs = WebHdfs(self.settings, timeout_s=5.0)
            self.hdfs.write(self.path, text.encode())
            return True
        except Exception as exc:  # HDFS down or restarting: the next publication tries again
            if self.hdfs is not None:
                self.hdfs.close()
                self.hdfs = None
            if time.monotonic() - self.last_error_logged > 60:
                self.last_error_logged = time.monotonic()
                log.warning("could not publish progress to %s: %s: %s", self.path, type(exc).__name__, exc)
            return False


def source_offsets(text: str | None) -> dict[str, dict[int, int]]:
    """A Kafka source's offsets as Spark reports them (`{"topic": {"0": 12, ...}}`), parsed:
    {topic: {partition: offset}}. Raises ValueError on anything else."""
    try:
        doc = json.loads(text or "{}")
        return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in doc.items()}
    except (TypeError, AttributeError, OverflowError) as exc:
        raise ValueError(f"not Kafka source offsets: {text!r:.100}") from exc


def dropped_by_watermark(progress) -> int:
    """Rows the query's stateful operators dropped in this batch as later than the watermark."""
    return sum(int(getattr(op, "numRowsDroppedByWatermark", 0) or 0) for op in (progress.stateOperators or ()))


def watermark_ms(progress) -> int | None:
    """The event-time watermark the progress reports (ms), or None when the query has none yet. Rows
    a batch drops as late are older than it (with several stateful operators Spark drops against the
    previous batch's, which is not later): a bound above them."""
    from datetime import datetime

    text = (progress.eventTime or {}).get("watermark")
    if not text:
        return None
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def rows_behind(progress) -> int | None:
    """How many records the query's last batch left unread in Kafka (latest − end offsets)."""
    total = 0
    for source in progress.sources or ():
        try:
            end = source_offsets(source.endOffset)
            latest = source_offsets(source.latestOffset)
        except ValueError:
            return None
        for topic, parts in latest.items():
            for partition, offset in parts.items():
                total += max(0, offset - end.get(topic, {}).get(partition, offset))
    return total


class ProgressFile:
    def __init__(
        self,
        settings: Settings,
        job: str,
        hooks: dict[str, Hook] | None = None,
        extra: dict | None = None,
        publish: Callable[[str], bool | None] | None = None,
        state_rows_counted: bool = True,
    ) -> None:
        """`publish` (HdfsPublisher in the jobs) receives the document to keep where readers find it;
        False back: it was not kept, and goes out again with the next report. Without
        `state_rows_counted` (a state store told not to count its rows, which then reports 0), the
        rows held are unknown (None)."""
        self.path = progress_path(settings, job)
        self.state_rows_counted = state_rows_counted
        self.hooks = hooks or {}
        self.publish = publish
        self.publish_every_s = settings.stack.progress_publish_s
        # An idle job republishes an unchanged document only this often: often enough that a reader
        # elsewhere never finds it older than it accepts, seldom enough not to write HDFS all day.
        self.keepalive_s = max(self.publish_every_s, published_max_age_s(settings) / 4)
        self.published_at = 0.0
        self.unpublished = False  # a change kept back by the publication interval
        self.lock = threading.Lock()
        self.state: dict = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "keepalive_s": self.keepalive_s,  # readers elsewhere, with settings of their own, accept that
            "started_ms": int(time.time() * 1000),
            "queries": {},
            "totals": {},
            **(extra or {}),
        }
        self.names: dict[str, str] = {}
        self.runs: dict[str, str] = {}  # each query's current run (a query started again has a new one)

    def started(self, query_id: str, name: str, run_id: str = "") -> None:
        with self.lock:
            self.names[query_id] = name
            self.runs[name] = run_id
            self.state["queries"].setdefault(name, {})["active"] = True
            self._write(publish=True)

    def terminated(self, query_id: str, error: str | None, run_id: str = "") -> None:
        with self.lock:
            name = self.names.get(query_id, query_id)
            if run_id and self.runs.get(name, run_id) != run_id:
                return  # an earlier run of a query started again since (Spark delivers this one later)
            query = self.state["queries"].setdefault(name, {})
            query["active"] = False
            query["error"] = (error or "")[:2000] or None
            self._write(publish=True)

    def idle(self) -> None:
        """No batch to run (Spark says so every few seconds): a change kept back goes out now, and
        the document stays fresh for readers."""
        with self.lock:
            self._write(changed=False)

    def progress(self, p) -> None:
        observed = {k: v.asDict() for k, v in (p.observedMetrics or {}).items()}
        counted = self.state_rows_counted
        state_rows = sum(op.numRowsTotal for op in (p.stateOperators or ())) if counted else None
        # The memory the state stores use (RocksDB's: its block cache and write buffers).
        state_bytes = sum(int(getattr(op, "memoryUsedBytes", 0) or 0) for op in (p.stateOperators or ()))
        # Rows a stateful operator dropped as later than the watermark: the speed layer's is on
        # ingest time, so none is in steady state; a catch-up whose partitions advance unevenly can
        # leave some behind it, and they are missing from the speed part until a batch run.
        dropped_late = dropped_by_watermark(p)
        if dropped_late:
            log.warning(
                "%s batch %s: %d rows later than the watermark dropped (missing from its output until a batch run "
                "covers their ingest time)",
                p.name,
                p.batchId,
                dropped_late,
            )
        summary = {
            "active": True,
            "batch_id": p.batchId,
            "reported_ms": int(time.time() * 1000),  # when this batch finished (p.timestamp: when it began)
            "timestamp": p.timestamp,
            "input_rows": p.numInputRows,
            "input_rows_per_s": p.inputRowsPerSecond,
            "processed_rows_per_s": p.processedRowsPerSecond,
            "batch_ms": (p.durationMs or {}).get("triggerExecution"),
            # Where the batch's time went: Spark's whole durationMs breakdown (latestOffset,
            # queryPlanning, addBatch, walCommit, commitOffsets, …) and the state stores' part of it.
            "duration_ms": dict(p.durationMs or {}),
            "state_ms": {
                name: sum(int(getattr(op, attr, 0) or 0) for op in (p.stateOperators or ()))
                for name, attr in (
                    ("updates", "allUpdatesTimeMs"),
                    ("removals", "allRemovalsTimeMs"),
                    ("commit", "commitTimeMs"),
                )
            },
            # Which stateful operator that time went to (de-duplication, aggregation), plan order.
            "state_by_operator": [
                {
                    "operator": str(getattr(op, "operatorName", "") or ""),
                    "rows": int(op.numRowsTotal or 0) if counted else None,
                    **{
                        name: int(getattr(op, attr, 0) or 0)
                        for name, attr in (
                            ("updated", "numRowsUpdated"),
                            ("removed", "numRowsRemoved"),
                            ("updates_ms", "allUpdatesTimeMs"),
                            ("removals_ms", "allRemovalsTimeMs"),
                            ("commit_ms", "commitTimeMs"),
                        )
                    },
                }
                for op in (p.stateOperators or ())
            ],
            "rows_behind": rows_behind(p),
            "state_rows": state_rows,
            "state_bytes": state_bytes,
            "dropped_late": dropped_late,
            "observed": observed,
        }
        extra = {}
        hook = self.hooks.get(p.name)
        if hook is not None:
            # A failing hook (a store outage while the archiver publishes its completeness) leaves
            # this batch's summary and totals counted, and says why its part is missing.
            try:
                extra = hook(p) or {}
            except Exception as exc:  # noqa: BLE001 - any failure of the hook's store
                summary["hook_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                log.warning("%s batch %s: its progress hook failed: %s", p.name, p.batchId, summary["hook_error"])
        with self.lock:
            self.state["queries"][p.name] = summary
            totals = self.state["totals"]
            totals["dropped_late"] = totals.get("dropped_late", 0) + dropped_late
            for metrics in observed.values():
                for key, value in metrics.items():
                    totals[key] = totals.get(key, 0) + int(value or 0)
            self.state.update(extra)
            self._write()

    def _write(self, publish: bool = False, changed: bool = True) -> None:
        """Rewrite the file beside the driver; publish at once (`publish`), a change at most every
        `publish_every_s`, and an unchanged document every `keepalive_s`."""
        self.state["updated_ms"] = int(time.time() * 1000)
        text = json.dumps(self.state, indent=1, default=str)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        replace_text(self.path, text)  # on disk before it replaces the last: it holds drops not recorded yet
        self.unpublished = self.unpublished or changed
        since_s = time.monotonic() - self.published_at
        due = (self.unpublished and since_s >= self.publish_every_s) or since_s >= self.keepalive_s
        if self.publish is not None and (publish or due):
            self.published_at = time.monotonic()
            self.unpublished = self.publish(text) is False

    def listener(self):
        """A StreamingQueryListener feeding this file (pyspark imported only when called)."""
        from pyspark.sql.streaming import StreamingQueryListener

        progress_file = self

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event) -> None:
                progress_file.started(str(event.id), event.name, str(event.runId))

            def onQueryProgress(self, event) -> None:
                try:
                    progress_file.progress(event.progress)
                except Exception:  # never kill the listener bus; the next batch retries
                    log.exception("could not record progress of %s", event.progress.name)

            def onQueryIdle(self, event) -> None:
                progress_file.idle()

            def onQueryTerminated(self, event) -> None:
                progress_file.terminated(str(event.id), event.exception, str(event.runId))

        return Listener()


def published_max_age_s(settings: Settings) -> float:
    """How old a published document a reader on another machine accepts from a running job."""
    return max(settings.stack.stuck_after_s, 10 * settings.stack.progress_publish_s)


def read_progress(settings: Settings, job: str, now_ms: int | None = None) -> dict:
    """The job's progress as last published on HDFS, checked to come from a live process: on this
    machine its pid must run; from another, the document must be recent (a job publishes every
    `stack.progress_publish_s` while it runs batches and while it idles, so silence for longer than
    `stack.stuck_after_s` means it is gone)."""
    import psutil

    from stores.webhdfs import WebHdfs, WebHdfsError

    state = None
    with WebHdfs(settings, timeout_s=5.0) as hdfs:
        for attempt in range(3):  # a publication replaces the file: a read may fall in between
            if attempt:
                time.sleep(0.2)
            try:
                raw = hdfs.read(published_path(settings, job))
            except WebHdfsError as exc:
                raise RuntimeError(f"progress cannot be read from HDFS: {exc}") from None
            try:
                state = json.loads(raw) if raw else None
            except ValueError:
                state = None
            if isinstance(state, dict):
                break
    if not isinstance(state, dict):
        raise RuntimeError("no progress reported yet")
    if state.get("host") in (None, socket.gethostname()):
        if not psutil.pid_exists(int(state.get("pid") or 0)):
            raise RuntimeError("progress is from a process that no longer runs")
    else:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        age_s = (now_ms - int(state.get("updated_ms") or 0)) / 1000
        # The job's own keepalive counts too (capped: a day): a reader set to accept less than the job
        # republishes an idle document would call every idle job gone.
        keepalive_s = state.get("keepalive_s")
        job_says_s = 2 * min(float(keepalive_s), 86_400.0) if isinstance(keepalive_s, (int, float)) else 0.0
        if age_s > max(published_max_age_s(settings), job_says_s):
            raise RuntimeError(f"progress from {state.get('host')} is {age_s:.0f} s old: the job is not reporting")
    return state


def read_local_progress(settings: Settings, job: str) -> dict:
    """The progress file beside the driver, rewritten after every batch: for benchmarks and
    diagnostics on the driver's machine (everything else reads the published copy)."""
    try:
        return json.loads(progress_path(settings, job).read_text())
    except (OSError, ValueError):
        raise RuntimeError("no progress file beside the driver") from None


class Stuck(RuntimeError):
    """A running query none of whose micro-batches finished for too long."""


def require_progressing(state: dict, queries: tuple[str, ...], stuck_after_s: float, now_ms: int | None = None) -> None:
    """Raise naming the first query that is not running, or none of whose micro-batches finished
    within `stuck_after_s` (since its last one, or since the job started): stuck behind its input."""
    require_running(state, queries)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    for name in queries:
        query = state["queries"][name]
        # reported_ms: this query's last batch; updated_ms: any write (files of jobs started before reported_ms)
        since_ms = (
            query.get("reported_ms")
            or (state.get("updated_ms") if "batch_id" in query else None)
            or state.get("started_ms")
            or now_ms
        )
        silent_s = (now_ms - since_ms) / 1000
        if silent_s > stuck_after_s:
            behind = query.get("rows_behind")
            last = (
                f"its last one (batch {query['batch_id']}) was {behind:,} records behind Kafka"
                if "batch_id" in query and behind is not None
                else "none has finished since it started"
            )
            raise Stuck(
                f"stuck: query {name} has finished no micro-batch for {silent_s:.0f} s "
                f"(more than stack.stuck_after_s={stuck_after_s:.0f}); {last}"
            )


def require_running(state: dict, queries: tuple[str, ...]) -> None:
    for name in queries:
        query = state.get("queries", {}).get(name, {})
        if not query.get("active"):
            raise RuntimeError(
                f"query {name} is not running" + (f": {query['error'][:300]}" if query.get("error") else "")
            )
