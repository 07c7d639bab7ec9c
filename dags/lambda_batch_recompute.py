"""lambda_batch_recompute: scheduled batch recomputation, and on demand from the Airflow UI.

wait for completeness → recompute (write + verify a new version) → verify again → swap the
pointer entries of the recomputed views → accuracy report → clean absorbed realtime rows. Serving
moves only at the swap, so a run failed before it leaves serving on the previous version; one failed
at the report or the clean-up serves the new version (its swap task succeeded), and the clean-up
waits for the report, whose rows it would delete: clear the failed task to finish the run. Rerunning
a cutoff that already serves is a no-op. The swap is a compare-and-set against the pointer as the recompute task
read it: if a manual `lambdactl batch` of one of its views swapped meanwhile, this run's swap fails
and changes nothing (another view's swap or a clean-up's bookkeeping does not fail it).
The logic lives in the platform (`lambdactl batch ...`); this file only wires the steps.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta

from airflow.exceptions import AirflowFailException, AirflowSkipException
from airflow.sdk import Param, PokeReturnValue, dag, task
from lambda_platform.commands import (
    LambdactlError,
    LambdactlRefused,
    context,
    lambdactl,
    refuse_undeclared_conf,
    say_cause,
)

INTERVAL = timedelta(seconds=int(os.environ.get("LAMBDA_BATCH__INTERVAL_S", "3600")))
# Settings too (batch.task_timeout_s, batch.completeness_wait_s), as infra/airflow passes them.
TASK_TIMEOUT = timedelta(seconds=int(os.environ.get("LAMBDA_BATCH__TASK_TIMEOUT_S", "7200")))
COMPLETENESS_WAIT_S = int(os.environ.get("LAMBDA_BATCH__COMPLETENESS_WAIT_S", "3600"))
NOTHING_NEW = 3  # `lambdactl batch --plan` exit code: no cutoff newer than the serving one (or overtaken)
NOT_COVERED_YET = 4  # ... the master dataset is not complete up to the cutoff yet: wait
CLEANUP_LEFT = 5  # `lambdactl clean-realtime`: rows left for the next clean-up; answers are unaffected
# An XCom the Airflow UI shows: the accuracy report's address (the "Accuracy report" extra link of
# infra/airflow_plugins); why a task failed is lambda_platform.commands.FAILURE_CAUSE_KEY.
REPORT_URL_KEY = "report_url"


def views_written() -> tuple[list[str], list[str]]:
    """The declared views' names and the retired ones, as the platform last wrote them
    (LAMBDA_VIEWS_FILE): the trigger form offers the declared ones. Both empty when the file is
    missing or unreadable: any names are then accepted, and `lambdactl batch` refuses unknown ones."""
    try:
        path = os.environ["LAMBDA_VIEWS_FILE"]
        if not os.path.isfile(path) or os.path.getsize(path) > 1_048_576:  # no FIFO to hang the parse on
            return [], []
        with open(path) as f:
            written = json.load(f)
        lists = [written.get(key) for key in ("views", "retired")]
    except Exception:  # noqa: BLE001 - whatever the file holds (nesting deep enough is a RecursionError)
        return [], []
    declared, retired = ([n for n in names if isinstance(n, str)] if isinstance(names, list) else [] for names in lists)
    return declared, [n for n in retired if n not in declared]


VIEWS, RETIRED = views_written()


def _params() -> dict:
    return context()["params"]


def given_cutoff() -> str:
    """The cutoff the run's form gave, or "" for the last complete one: blanks are none (the form's
    pattern takes them, and `--cutoff "  "` failed the run)."""
    return (_params()["cutoff"] or "").strip()


def run_step(*args: str) -> dict:
    """lambdactl for a step of a run that planned its own cutoff (mode next_cutoff, no cutoff given):
    a run beside it (an operator's `lambdactl batch`) that moved serving past that cutoff, or swapped
    it first, leaves this one nothing to do: the step is skipped, naming why, and the next run plans a
    newer cutoff. A cutoff the user chose, or a full recompute asked for, fails on the same refusal:
    what was asked for did not happen."""
    p = _params()
    if given_cutoff() or p["mode"] != "next_cutoff":
        return lambdactl(*args)
    try:
        return lambdactl(*args, "--skip-if-overtaken", expected=(NOTHING_NEW,))
    except LambdactlError as exc:
        if exc.code == NOTHING_NEW:
            raise AirflowSkipException(str(exc).splitlines()[-1].strip()[-1_000:]) from exc
        raise


def refuse_backfill() -> None:
    """A run plans the latest cutoff whatever its logical date: a backfill's runs (which Airflow runs
    beside other runs, max_active_runs notwithstanding) would each recompute the same cutoff, and all
    but the first fail their swap. Refused, naming what to do instead."""
    run = context().get("dag_run")
    run_type = getattr(run, "run_type", None)
    if getattr(run_type, "value", run_type) == "backfill":
        cause = (
            "a backfill is refused: every run recomputes the latest covered cutoff whatever its logical "
            "date; trigger one run (mode full_recompute to recompute from the whole master dataset)"
        )
        say_cause(cause)
        raise AirflowFailException(cause)


PARAMS = ("mode", "cutoff", "views")


@dag(
    dag_id="lambda_batch_recompute",
    schedule=INTERVAL,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=20), "execution_timeout": TASK_TIMEOUT},
    params={
        "mode": Param(
            "next_cutoff",
            enum=["next_cutoff", "full_recompute"],
            description="next_cutoff: only when a newer cutoff is covered; "
            "full_recompute: recompute every view from the whole master dataset even at the same cutoff",
        ),
        "cutoff": Param(
            "",
            type="string",
            maxLength=40,  # an ISO time; the API's recompute route has the same limit
            # An ISO time begins with its year: "--force" was read by lambdactl as an option.
            pattern=r"^\s*$|^\s*[0-9]",
            description="explicit ISO cutoff on an ingest-bucket boundary, e.g. 2026-03-01T10:00:00Z (without a "
            "zone: UTC; empty: the last complete one)",
        ),
        "views": Param(
            [],
            type="array",
            description="views to recompute (none chosen: all); `lambdactl batch` refuses undeclared ones",
            # Offered as a multi-select (examples) of the declared views; accepted (the enum): those and
            # the retired ones. Airflow refuses a run naming another one, naming it. A view `lambdactl
            # views apply` just added is offered from the DAG's next parse
            # (dag_processor.min_file_process_interval, 30 s). Airflow checks a run's params against
            # the enum again at each task's start, before any of the DAG's code, and a failure there has
            # no cause: a run whose view is removed meanwhile passes that check (retired), and
            # `lambdactl batch` refuses it, naming the view (the task's failure cause).
            maxItems=100,  # the API's recompute route has the same limit
            items={
                "type": "string",
                "pattern": r"^[A-Za-z_][A-Za-z0-9_]{0,99}$",
                **({"enum": VIEWS + RETIRED} if VIEWS else {}),
            },
            **({"examples": VIEWS} if VIEWS else {}),
        ),
    },
    tags=["lambda"],
    doc_md=__doc__,
)
def lambda_batch_recompute():
    # A sensor in reschedule mode: between pokes it holds no worker slot (the task instance shows
    # `up_for_reschedule`); it gives up after batch.completeness_wait_s (an hour). A refusal that
    # waiting cannot fix (a cutoff off the bucket grid, behind serving) fails the task at once,
    # naming why (LambdactlRefused, in every task); any other failure is retried twice (a store that
    # blinked), each poke at most two minutes.
    @task.sensor(
        poke_interval=15,
        timeout=COMPLETENESS_WAIT_S,
        mode="reschedule",
        retries=2,
        retry_delay=timedelta(seconds=20),
        execution_timeout=timedelta(minutes=2),
    )
    def wait_for_completeness() -> PokeReturnValue:
        """The archiver's completeness must cover the cutoff: the plan of the run once it does."""
        refuse_backfill()
        refuse_undeclared_conf(PARAMS)
        p = _params()
        args = ["batch", "--plan"] + (["--cutoff", given_cutoff()] if given_cutoff() else [])
        if p["views"]:
            args += ["--views", ",".join(p["views"])]
        if p["mode"] == "full_recompute":
            args.append("--force")
        try:
            # "Not covered yet" stays the cause: the one a sensor that gives up is left with.
            plan = lambdactl(*args, expected=(NOTHING_NEW,))
        except LambdactlError as exc:
            if exc.code == NOTHING_NEW:
                raise AirflowSkipException("no cutoff newer than the serving version's") from exc
            if exc.code == NOT_COVERED_YET:
                return PokeReturnValue(is_done=False)
            raise
        return PokeReturnValue(is_done=True, xcom_value=plan)

    @task
    def recompute(plan: dict) -> dict:
        p = _params()
        args = ["batch", "--no-swap", "--json", "--cutoff", plan["cutoff"]]
        if p["views"]:
            args += ["--views", ",".join(p["views"])]
        if p["mode"] == "full_recompute":
            args.append("--force")
        result = run_step(*args)
        if result.get("skipped"):
            raise AirflowSkipException(result["skipped"])
        return result

    @task
    def verify(run: dict) -> dict:
        lambdactl("batch", "--verify", str(run["version"]))
        return run

    @task
    def swap(run: dict) -> dict:
        return run_step("batch", "--swap", str(run["version"]))

    @task(retries=1)
    def report(run: dict) -> dict:
        # --reuse: a retry after the first attempt stored the report names that one, not a second.
        result = lambdactl("report", "--version", str(run["version"]), "--reuse", "--json")
        if not result.get("id"):  # no link to a report that is not there; a retry would build it again
            cause = f"lambdactl report named no report: {str(result)[:500]}"
            say_cause(cause)
            raise LambdactlRefused(["report"], 0, cause)
        url = result.get("url") or f"{os.environ.get('LAMBDA_API_URL', '')}/api/v1/reports/{result['id']}/html"
        print(f"accuracy report: {url}")
        context()["ti"].xcom_push(key=REPORT_URL_KEY, value=url)
        return {**result, "html_url": url}

    @task
    def clean_realtime(_: dict) -> None:
        try:
            lambdactl("clean-realtime", expected=(CLEANUP_LEFT,))
        except LambdactlError as exc:
            if exc.code != CLEANUP_LEFT:
                raise
            # Never read below the cutoff and ended by their TTL: not a failed run; the next run's
            # clean-up goes on.
            print(f"the clean-up left rows for the next one (answers are unaffected): {exc}")

    planned = wait_for_completeness()
    written = recompute(planned)
    swapped = swap(verify(written))
    clean_realtime(report(swapped))


lambda_batch_recompute()
