"""Admin routes (token required): trigger a batch recomputation through Airflow's REST API."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from api.deps import SettingsDep, TokenDep

router = APIRouter(prefix="/api/v1/admin", tags=["admin"], dependencies=[TokenDep])


class RecomputeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["next_cutoff", "full_recompute"] = "next_cutoff"
    cutoff: str = Field("", description="ISO cutoff on an ingest-bucket boundary; empty: the last complete one")
    views: list[str] = Field(default_factory=list, description="views to recompute; empty: all")


@router.post("/recompute", status_code=202, summary="Trigger lambda_batch_recompute in Airflow; the run id")
def recompute(settings: SettingsDep, body: RecomputeRequest | None = None) -> dict[str, Any]:
    from infra.airflow import AirflowClient

    body = body or RecomputeRequest()
    client = AirflowClient(settings, timeout_s=15)
    dag_id = settings.airflow.dag_id
    try:
        client.unpause(dag_id)
        run_id = client.trigger(dag_id, body.model_dump())
    except Exception as exc:
        raise HTTPException(503, {"component": "airflow", "message": f"{type(exc).__name__}: {exc}"}) from None
    finally:
        client.close()
    return {"dag_id": dag_id, "dag_run_id": run_id, "conf": body.model_dump(),
            "airflow_url": f"http://{settings.airflow.host}:{settings.airflow.port}/dags/{dag_id}/runs/{run_id}"}
