"""Admin routes (token required): trigger a batch recomputation through Airflow's REST API; read the
declared views again (`lambdactl views apply` calls it once the speed layer maintains them).

As for every body, the token is checked first and the body read with the api.max_body_bytes cap.
"""

from __future__ import annotations

import hashlib
import logging
from contextlib import ExitStack
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.concurrency import run_in_threadpool

from api.deps import AdminTokenDep, SettingsDep, held_body
from api.errors import ApiError, error_responses, failure_text
from api.views_install import MarksUnread, refresh_views
from api.views_install import reload_views as reload
from definitions.files import LockHeld, state_lock
from definitions.section import browser_url
from definitions.settings import Settings
from definitions.times import parse_iso_ms

log = logging.getLogger("lambda.api")
router = APIRouter(prefix="/api/v1/admin", tags=["admin"], dependencies=[AdminTokenDep])


class RecomputeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["next_cutoff", "full_recompute"] = "next_cutoff"
    cutoff: str = Field(
        "", max_length=40, description="ISO cutoff on an ingest-bucket boundary; empty: the last complete one"
    )
    views: list[str] = Field(default_factory=list, max_length=100, description="views to recompute; empty: all")

    @field_validator("cutoff")
    @classmethod
    def _iso_cutoff(cls, value: str) -> str:
        """A malformed cutoff is refused here, naming it, rather than by the run's first task."""
        if value:
            parse_iso_ms(value)  # its ValueError says what is wrong; pydantic names the field
        return value


class RecomputeStarted(BaseModel):
    dag_id: str
    dag_run_id: str
    conf: dict[str, Any]
    airflow_url: str


def refusal(dag_id: str, reason: str) -> tuple[int, str]:
    """The answer to Airflow refusing a run the API checked: a view the DAG does not offer yet is a
    409 (its form lists the declared views once Airflow parsed them again); anything else is a 422
    in Airflow's words."""
    if reason.startswith("Invalid input for param views"):
        return 409, (
            f"Airflow's {dag_id} does not accept this run yet: it offers a view once it has parsed the "
            "declared views again (every 30 s or so); try again shortly"
        )
    return 422, f"Airflow's {dag_id} refused the run: {reason or 'no reason given'}"


class NotNow(Exception):
    """Airflow would take the run, but it should not be asked to now (409, saying why)."""


def next_run_id(latest: str) -> str:
    """The id of the run a request queues, given the id of the DAG's run created last: requests that
    saw the same runs name the same run, so Airflow takes one of them and refuses the others."""
    return "api_recompute__" + hashlib.sha256(latest.encode()).hexdigest()[:16]


# One request at a time triggers on this host (the API's workers share its state directory).
TRIGGER_LOCK = "recompute.lock"
# All of a request's calls to Airflow (up to ten) end within this; the lock is never held longer.
TRIGGER_BUDGET_S = 20.0


class NoLock(Exception):
    """The API cannot take its recompute lock (its state directory cannot be written): a 503 saying
    so, not one blaming Airflow."""


def _trigger(settings: Settings, body: RecomputeRequest) -> str:
    """One request at a time on this host: Airflow's SQLite-backed API has answered two simultaneous
    reads of the latest run differently, so two requests at once could name two runs."""
    with ExitStack() as held:
        try:
            held.enter_context(state_lock(settings.state_dir, TRIGGER_LOCK, "recompute request", wait=False))
        except LockHeld:
            raise NotNow(
                f"another recompute request is triggering a run of {settings.airflow.dag_id} now; try again once "
                "it has been answered"
            ) from None
        except (OSError, ValueError) as exc:  # ValueError: a state directory others can change
            raise NoLock(f"{type(exc).__name__}: {exc}") from None
        return _trigger_one(settings, body)


def _trigger_one(settings: Settings, body: RecomputeRequest) -> str:
    """Trigger one run, unless one already waits to start (every request queued a run before: a
    loop of requests queued a day of full recomputations), or an operator paused the DAG (each
    request unpaused it, silently ending a maintenance pause and starting its schedule again).
    Requests at the same instant all pass those checks: the run's id, chosen from the run created
    last, makes Airflow queue one of them only."""
    from stores.airflow import AirflowClient, AirflowConflict

    dag_id = settings.airflow.dag_id
    client = AirflowClient(settings, timeout_s=15, deadline_s=TRIGGER_BUDGET_S)
    try:
        # The latest run is read before anything is checked: a request whose checks passed before
        # another's run was made, but which read the latest run after, would name a run of its own.
        latest = client.latest_run(dag_id)
        waiting = client.runs(dag_id, ["queued"])
        if waiting:
            raise NotNow(
                f"a run of {dag_id} already waits to start ({waiting[0]['dag_run_id'][:200]}); "
                "try again once it has started"
            )
        if client.dag(dag_id).get("is_paused"):
            raise NotNow(f"{dag_id} is paused in Airflow; unpause it there to run recomputations")
        run_id = next_run_id(latest["dag_run_id"] if latest else "")
        for _ in range(3):
            try:
                return client.trigger(dag_id, body.model_dump(), run_id=run_id)
            except AirflowConflict:
                if client.run(dag_id, run_id).get("state") in ("queued", "running"):
                    raise NotNow(
                        f"another request has just triggered a run of {dag_id} ({run_id}); try again once it has "
                        "started"
                    ) from None
                # A run of that id has ended (the run created last was deleted, then made again with
                # its id): the next id of the chain.
                run_id = next_run_id(run_id)
        raise NotNow(f"runs of {dag_id} named after the latest one exist already; try again shortly")
    finally:
        client.close()


def _recompute_request(data: bytes) -> RecomputeRequest:
    """The recompute's body (none: the defaults); 422 naming each field that is wrong."""
    try:
        return RecomputeRequest.model_validate_json(data) if data.strip() else RecomputeRequest()
    except ValidationError as exc:
        items = [
            {"loc": ["body", *e.get("loc", ())], "msg": str(e.get("msg", "invalid")).removeprefix("Value error, ")}
            for e in exc.errors()
        ]
        raise ApiError(
            422,
            "body: " + "; ".join(f"{'.'.join(map(str, i['loc'][1:])) or 'body'}: {i['msg']}" for i in items[:5]),
            errors=items,
        ) from None


@router.post(
    "/recompute",
    status_code=202,
    summary="Trigger lambda_batch_recompute in Airflow; the run id",
    response_model=None,
    responses={202: {"model": RecomputeStarted}, **error_responses(401, 409, 413, 422, 503)},
    openapi_extra={
        "requestBody": {
            "required": False,
            "content": {"application/json": {"schema": RecomputeRequest.model_json_schema()}},
        }
    },
)
async def recompute(request: Request, settings: SettingsDep) -> dict[str, Any]:
    async with held_body(request, settings.api.max_body_bytes) as data:
        body = _recompute_request(data)
    unknown = [name for name in body.views if name not in request.app.state.views.names()]
    if unknown:
        declared = ", ".join(request.app.state.views.names())
        raise ApiError(422, f"views: unknown view(s) {[u[:100] for u in unknown[:5]]}; declared views: {declared}")
    from stores.airflow import AirflowRefused, AirflowTimeout

    try:
        run_id = await run_in_threadpool(_trigger, settings, body)
    except NotNow as exc:
        raise ApiError(409, str(exc), component="airflow") from None
    except NoLock as exc:
        log.warning("the recompute lock cannot be taken: %s", exc)
        raise ApiError(503, "the API cannot take its recompute lock (its log says why); try again shortly") from None
    except AirflowRefused as exc:
        log.warning("Airflow refused a run of %s: %s", settings.airflow.dag_id, exc)
        status, message = refusal(settings.airflow.dag_id, exc.reason)
        raise ApiError(status, message, component="airflow") from None
    except AirflowTimeout as exc:
        log.warning("triggering %s: %s", settings.airflow.dag_id, exc)
        raise ApiError(
            503,
            f"Airflow did not answer within {TRIGGER_BUDGET_S:g} s; a run may have been queued (Airflow's runs of "
            f"{settings.airflow.dag_id} say) and a request repeated while it waits is refused",
            component="airflow",
        ) from None
    except Exception as exc:
        log.warning("triggering %s failed: %s: %s", settings.airflow.dag_id, type(exc).__name__, exc)
        raise ApiError(503, "Airflow did not accept the run; try again shortly", component="airflow") from None
    dag_id = settings.airflow.dag_id
    return {
        "dag_id": dag_id,
        "dag_run_id": run_id,
        "conf": body.model_dump(),
        "airflow_url": f"{browser_url(settings.airflow.host, settings.airflow.port, settings.airflow.public_url)}"
        f"/dags/{dag_id}/runs/{run_id}",
    }


class ViewsReloaded(BaseModel):
    views: list[str]
    added: list[str]
    removed: list[str]


# How long a reload waits for the API's other worker processes to read the declared views too.
WORKERS_RELOAD_S = 30.0


async def _every_worker_reloads(request: Request, views: bool = True, counted: tuple[int, int] | None = None) -> None:
    """With several worker processes (api.workers): answer once each serves the views this one read
    (`views`), or read the stores again as this one did. `counted`: the count taken before (count())."""
    sync = request.app.state.worker_sync
    if sync is None:
        return
    generation = sync.made(*counted, views) if counted is not None else sync.bump(views)
    behind = await sync.wait_for(generation, WORKERS_RELOAD_S)
    failed = {worker: why for worker, why in behind.items() if why.startswith("it could not")}
    done = "switch to the declared views" if views else "read the speed marker, the replay marks and the pointer again"
    if failed:
        worker, why = next(iter(failed.items()))
        raise ApiError(409, f"API worker {worker} did not {done}: {why}; it serves the views it served")
    if behind:
        raise ApiError(
            503,
            f"{len(behind)} API worker process(es) did not {done} within {WORKERS_RELOAD_S:.0f}s; "
            "they do when they can: ask again to confirm",
            headers={"Retry-After": "5"},
        )


@router.post(
    "/views/reload",
    summary="Read the declared views again and serve them; the views added and removed",
    response_model=None,
    responses={200: {"model": ViewsReloaded}, **error_responses(401, 409, 503)},
)
async def reload_views(request: Request, settings: SettingsDep) -> dict[str, Any]:
    sync = request.app.state.worker_sync
    seen = sync.generation() if sync is not None else 0
    try:
        before, after = await run_in_threadpool(reload, request.app, settings)
    except Exception as exc:  # a view module that does not import or declares invalid views
        raise _not_loaded(exc) from None
    counted = sync.count() if sync is not None else None
    if counted is not None and counted[0] != seen + 1:
        # Another reload (or refresh) was counted while this one read the views, perhaps of newer
        # views: read them again, after this count, so no worker claims a count past that reload's
        # with views read before it.
        try:
            _, after = await run_in_threadpool(reload, request.app, settings)
        except Exception as exc:  # counted already: the others follow it, this worker says it could not
            sync.report(counted[0], failure_text(exc))
            raise _not_loaded(exc, "it serves the views it read just before (its follow tries again)") from None
    await _every_worker_reloads(request, counted=counted)
    old, new = set(before.names()), set(after.names())
    return {"views": after.names(), "added": sorted(new - old), "removed": sorted(old - new)}


def _not_loaded(exc: Exception, serving: str = "the API serves the views it served") -> ApiError:
    log.warning("the declared views cannot be loaded: %s: %s", type(exc).__name__, exc)
    return ApiError(409, f"the declared views cannot be loaded ({failure_text(exc)}); {serving}")


class ViewsRefreshed(BaseModel):
    views: list[str]


@router.post(
    "/views/refresh",
    summary="Read the speed marker, the replay marks and the pointer again; the views served (unchanged)",
    response_model=None,
    responses={200: {"model": ViewsRefreshed}, **error_responses(401, 409, 503)},
)
async def refresh(request: Request) -> dict[str, Any]:
    """What `lambdactl replay` asks when a replay begins and when it switches. Unlike /views/reload it
    never reads a view module, so an edited view module is served only once it is applied."""
    sync = request.app.state.worker_sync
    due = sync.reload_due() if sync is not None else None
    if due is not None:  # a reload this worker has not followed yet: counting a refresh would hide it
        try:
            await run_in_threadpool(reload, request.app, request.app.state.settings)
        except Exception as exc:  # noqa: BLE001 - said below, the served views kept
            log.warning("the declared views cannot be loaded: %s: %s", type(exc).__name__, exc)
            raise ApiError(
                409, "this API worker cannot read the declared views; it serves the views it served"
            ) from None
        sync.reloaded(due)
    try:
        registry = await run_in_threadpool(refresh_views, request.app)
    except MarksUnread:
        raise ApiError(
            503,
            "the API could not read the replay marks again; it answers from the last ones read, and refuses "
            "a view with a switched replay once they are too old: ask again",
            component="hdfs",
            headers={"Retry-After": "5"},
        ) from None
    except Exception as exc:  # the stores' failures are refused per query; anything else is said here
        log.warning("the served views cannot be made again: %s: %s", type(exc).__name__, exc)
        raise ApiError(503, "the API could not read its stores again; it serves as before: ask again") from None
    await _every_worker_reloads(request, views=False)
    return {"views": registry.names()}
