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

import json
from datetime import datetime, timedelta

from airflow.sdk import dag, task
from lambda_platform.commands import lambdactl, refuse_undeclared_conf


def _run(*args: str) -> dict:
    """A task's command, what it did printed into the task's log. Its refusals are retried, as every
    failure is: `compact-master` refuses while another compaction holds its lease or runs from this
    state directory, or before the archiver published its completeness, which passes."""
    refuse_undeclared_conf(())
    done = lambdactl(*args, refusal_retried=True)
    print(json.dumps(done))
    return done


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
    # Each task runs the platform's command (lambda_platform.commands): when it fails, its last words
    # are the task's `failure_cause`, shown in the UI without the log; what it did is in its log. The
    # DAG takes no parameters: a run's conf naming any is refused, naming it, rather than passed over.
    @task
    def housekeeping() -> dict:
        return _run("housekeeping", "--json")

    @task
    def compact_master() -> dict:
        # Not waiting for a compaction an operator runs: the task would hold Airflow's task slot
        # (airflow.parallelism, 1 by default) for hours, every batch task behind it. Refused, it is retried.
        return _run("compact-master", "--json", "--no-wait")

    housekeeping()
    compact_master()


lambda_housekeeping()
