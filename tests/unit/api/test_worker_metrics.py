"""With several API worker processes, GET /metrics sums what every worker counted (prometheus_client's
multiprocess mode): two processes count, a third reads the sum."""

from __future__ import annotations

import os
import subprocess
import sys

from api.metrics import ApiMetrics

COUNT = """
import sys
from pathlib import Path
from api.metrics import ApiMetrics
metrics = ApiMetrics(Path(sys.argv[1]))
metrics.events_accepted.inc(int(sys.argv[2]))
metrics.latency.labels("page_views", "GET", "200").observe(0.003)
"""


def test_metrics_of_every_worker_are_summed(tmp_path):
    shared = tmp_path / "metrics"
    shared.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(shared)}
    for count in (3, 4):
        subprocess.run([sys.executable, "-c", COUNT, str(shared), str(count)], env=env, check=True, timeout=60)
    text = ApiMetrics(shared).exposition().decode()
    assert "lambda_ingest_events_total 7.0" in text, text
    assert 'lambda_api_request_seconds_count{method="GET",route="page_views",status="200"} 2.0' in text, text


def test_one_process_exposes_its_own_metrics():
    metrics = ApiMetrics()
    metrics.events_accepted.inc(2)
    assert "lambda_ingest_events_total 2.0" in metrics.exposition().decode()
