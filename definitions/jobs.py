"""The names of the platform's streaming jobs and their queries: a contract between the jobs that
report progress under them (stores.progress) and whoever reads it (health probes, status)."""

from __future__ import annotations

ARCHIVER = "archiver"
ARCHIVER_MASTER_QUERY = "archiver-master"
ARCHIVER_DLQ_QUERY = "archiver-dlq"

SPEED_LAYER = "speed-layer"
SPEED_QUERY = "speed-views"
