"""The settings of the local stack's process management and of logging (sections `stack` and
`logging` of definitions.settings.Settings)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from definitions.section import AbsolutePath, HdfsPath
from definitions.section import Section as _Section

AIRFLOW_COMPANIONS = ("airflow-scheduler", "airflow-dag-processor")
# Run by the stack before no task deferred (the DAG's sensor reschedules): a list written then may
# still name it, and it is left out.
RETIRED_SERVICES = ("airflow-triggerer",)
# The processes supervisord runs (the stores are started on their own).
SUPERVISED = ("archiver", "speed-layer", "api", "airflow", *AIRFLOW_COMPANIONS)


class StackSettings(_Section):
    # Services `lambdactl up` runs as local processes; empty it to point at real clusters.
    managed_services: list[str] = [
        "kafka",
        "hdfs-namenode",
        "hdfs-datanode",
        "hbase",
        "hbase-thrift",
        "cassandra",
        "archiver",
        "speed-layer",
        "api",
        "airflow",
        "airflow-scheduler",
        "airflow-dag-processor",
    ]
    java_home: AbsolutePath = ""
    # Seconds `down` waits for a process after SIGTERM before it SIGKILLs it.
    stop_timeout_s: float = Field(30, ge=1, le=3_600)
    # The platform's processes (archiver, speed layer, API, Airflow) run under supervisord, which
    # restarts one that exits: after `restart_backoff_s`, doubling with each restart still inside
    # the window, up to `restart_backoff_max_s`. At most `restart_max` restarts within
    # `restart_window_s`: the next exit is a restart loop, and the supervisor gives up on that
    # process (`lambdactl status` says why; `lambdactl up` tries it again). See docs/operations.md.
    restart_max: int = Field(5, ge=0, le=1_000)
    restart_window_s: float = Field(600, gt=0, le=7 * 86_400)
    restart_backoff_s: float = Field(1.0, gt=0, le=3_600)
    restart_backoff_max_s: float = Field(60.0, gt=0, le=86_400)
    # How readily each supervised process yields the CPU (0..19; a process not named: 0, as the
    # stores): the nice value of its session's Linux autogroup (infra/session_leader.py). The query
    # API, unnamed, answers first when it is busy; the streaming jobs and Airflow (and the batch jobs
    # its tasks start) take what it leaves, and all of it when it is idle (bench/api_load.py measures
    # the API's latency while they run).
    cpu_nice: dict[str, int] = {
        "archiver": 10,
        "speed-layer": 5,
        "airflow": 10,
        "airflow-scheduler": 10,
        "airflow-dag-processor": 10,
    }
    # Seconds a started process must stay up before the supervisor calls it running.
    start_s: int = Field(5, ge=0, le=3_600)
    # A streaming job none of whose micro-batches finished for this long is reported stuck
    # (unhealthy, with how far behind Kafka it was) by `lambdactl status`, `up` and /health: its
    # queries fire at least every few seconds (the archiver's ticks), so silence means a hang.
    stuck_after_s: float = Field(300, gt=0, le=7 * 86_400)
    # Where the streaming jobs publish their progress on HDFS (what health and status read), and
    # at most how often a change between their start and end (an idle job's unchanged document goes
    # out a quarter as often as readers elsewhere need it: stores.progress.published_max_age_s).
    progress_dir: HdfsPath = "/lambda/progress"
    progress_publish_s: float = Field(5.0, gt=0, le=60)
    # Every log of the stack (the platform's processes, the stores, the supervisor) rotates at
    # this size, keeping this many older files beside it.
    log_max_bytes: int = Field(50 * 2**20, ge=16 * 1024, le=2**40)
    log_backups: int = Field(5, ge=1, le=1_000)

    @model_validator(mode="after")
    def _cpu_nice_known(self) -> StackSettings:
        for name, nice in self.cpu_nice.items():
            if name not in SUPERVISED:
                raise ValueError(
                    f"stack.cpu_nice names {name!r}, which is none of the supervised processes {SUPERVISED}"
                )
            if not 0 <= nice <= 19:
                raise ValueError(f"stack.cpu_nice[{name!r}] is {nice}: a nice value from 0 to 19 (0: as the stores)")
        return self

    @model_validator(mode="after")
    def _backoff_ordered(self) -> StackSettings:
        if self.restart_backoff_max_s < self.restart_backoff_s:
            raise ValueError(
                f"stack.restart_backoff_max_s ({self.restart_backoff_max_s:g}) is below stack.restart_backoff_s "
                f"({self.restart_backoff_s:g}): the longest wait before a restart, at least the first one"
            )
        return self

    @model_validator(mode="after")
    def _restart_loop_seen(self) -> StackSettings:
        """restart_max restarts of a process that dies at once must fall within restart_window_s, or
        the budget never fills and the loop is never given up (infra/restarts.Budget)."""
        waits = sum(min(self.restart_backoff_max_s, self.restart_backoff_s * 2.0**i) for i in range(self.restart_max))
        if self.restart_max and waits >= self.restart_window_s:
            raise ValueError(
                f"stack.restart_window_s ({self.restart_window_s:g}) is within the waits before stack.restart_max "
                f"({self.restart_max}) restarts ({waits:g} s): a process dying at once would be restarted for ever, "
                "never given up; widen the window or shorten the waits"
            )
        return self

    @model_validator(mode="after")
    def _airflow_whole(self) -> StackSettings:
        """Airflow runs as three programs (API server `airflow`, scheduler, DAG processor): a list
        naming `airflow` (as lists written before the split do) manages all three."""
        self.managed_services[:] = [s for s in self.managed_services if s not in RETIRED_SERVICES]
        if "airflow" in self.managed_services:
            for part in AIRFLOW_COMPANIONS:
                if part not in self.managed_services:
                    self.managed_services.append(part)
        return self


class LoggingSettings(_Section):
    """How every process of the platform logs (definitions/logs.py)."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["text", "json"] = "text"
