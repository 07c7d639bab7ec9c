"""Prometheus metrics of the API: request latency, merge provenance, store errors."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess


class ApiMetrics:
    """`shared_dir`: where every worker process of the API keeps its values (prometheus_client's
    multiprocess mode, which the worker's PROMETHEUS_MULTIPROC_DIR selected); the exposition sums them."""

    def __init__(self, shared_dir: Path | None = None) -> None:
        self.shared_dir = shared_dir
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "lambda_api_request_seconds",
            "API request latency",
            ["route", "method", "status"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.merged_buckets = Counter(
            "lambda_merge_buckets_total",
            "merged buckets by the part that contributed",
            ["view", "part"],
            registry=self.registry,
        )
        self.store_errors = Counter(
            "lambda_store_errors_total", "store read failures", ["component"], registry=self.registry
        )
        self.partial_answers = Counter(
            "lambda_partial_answers_total", "answers flagged complete=false", ["view"], registry=self.registry
        )
        self.events_accepted = Counter(
            "lambda_ingest_events_total", "events accepted by POST /api/v1/events", registry=self.registry
        )
        self.events_rejected = Counter(
            "lambda_ingest_rejected_total", "events rejected by POST /api/v1/events", registry=self.registry
        )

    def exposition(self) -> bytes:
        if self.shared_dir is None:
            return generate_latest(self.registry)
        every_worker = CollectorRegistry()
        multiprocess.MultiProcessCollector(every_worker, path=str(self.shared_dir))
        return generate_latest(every_worker)
