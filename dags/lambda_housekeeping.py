"""lambda_housekeeping: daily, delete Airflow's history older than `airflow.keep_history_days`, and
compact the master dataset's finished ingest hours.

Airflow never removes its task logs, its DAG processor's dated log folders or its run records on
its own; on a platform that runs for years they fill the disk and slow its database. This DAG runs
`lambdactl housekeeping` (infra/airflow_housekeeping) once a day: the older log files go, and
`airflow db clean` removes the older runs, task instances, XComs and audit-log rows. A run that
fails (the database busy) is retried; running it again deletes nothing more.

Beside it, `lambdactl compact-master` (batch_layer/compaction) rewrites the ingest hours the archiver
has finished as a few large files and deletes their small originals: the archiver writes ~35,000
files a day. Run again, beside a batch run, or after a crash, it loses and duplicates nothing.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.exceptions import AirflowFailException
from airflow.sdk import dag, task


def platform_command(args: str) -> str:
    """The platform's command line, as infra/airflow passes it; the shell expands the path (never
    templated), so no character of it is read as Jinja or split."""
    if not os.environ.get("LAMBDA_PLATFORM_BIN"):
        raise AirflowFailException(
            "LAMBDA_PLATFORM_BIN is not set: Airflow was not started by the platform (`lambdactl up`)"
        )
    return f'"$LAMBDA_PLATFORM_BIN/lambdactl" {args}'


@dag(
    dag_id="lambda_housekeeping",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5), "execution_timeout": timedelta(hours=1)},
    tags=["lambda"],
    doc_md=__doc__,
)
def lambda_housekeeping():
    @task.bash
    def housekeeping() -> str:
        return platform_command("housekeeping --json")

    @task.bash
    def compact_master() -> str:
        return platform_command("compact-master --json")

    housekeeping()
    compact_master()


lambda_housekeeping()
