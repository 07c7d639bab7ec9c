"""The bodies view queries answer with: their documented models (the OpenAPI document's schemas),
and the plain dicts built from the serving layer's answers (JSON without the models' cost per
answer)."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.window import iso
from serving_layer.answers import SeriesAnswer, TopAnswer

# --- documented bodies ----------------------------------------------------------------------------


class ProvenanceBody(BaseModel):
    batch_version: int | None = Field(description="the batch views' version merged (none before the first batch run)")
    cutoff: str | None = Field(description="its cutoff (ingest time): realtime rows at or after it were added")
    complete: bool = Field(
        description="false when counts may be missing: a store could not be read and `partial` "
        "was asked for, or batch runs stopped so long that realtime rows the answer "
        "needs may have expired (see `reasons`)"
    )
    unavailable: list[str] = Field(description="the stores left out of a partial answer")
    reasons: list[str] = Field(description="why the answer is not complete, one sentence each; empty when complete")


class SeriesPoint(BaseModel):
    bucket: str = Field(description="the bucket's start (event time)")
    value: float = Field(description="merged value: batch + speed (distinct views: the sketches' union)")
    batch: float
    speed: float
    exact: bool


class SeriesBody(BaseModel):
    view: str
    keys: dict[str, str]
    granularity: str
    start: str
    end: str
    series: list[SeriesPoint]
    total: float
    exact: bool
    provenance: ProvenanceBody


class TopRow(BaseModel):
    model_config = ConfigDict(extra="allow", json_schema_extra={"description": "the view's keys, then the values"})

    value: int
    batch: int
    speed: int


class TopBody(BaseModel):
    view: str
    granularity: str
    start: str
    end: str
    limit: int
    rows: list[TopRow]
    provenance: ProvenanceBody


class ViewInfo(BaseModel):
    name: str
    keys: list[str]
    aggregation: str
    column: str | None
    where: str | None
    granularities: list[str]
    layout: str
    description: str
    state: Literal["building", "serving", "replaying", "retired", "unknown"] = Field(
        description="serving: answers are exact; building: being added or rebuilt, its queries answer 409 "
        "with the reason; replaying: its realtime rows are being written again from Kafka under a fresh name "
        "(`lambdactl replay`), and it answers from the rows it had until the replay switches to them; retired: no longer declared; unknown: the batch views "
        "cannot be read now"
    )
    reason: str | None = Field(None, description="why it is building or replaying")
    changing: str | None = Field(
        None,
        description="its declaration changed: the new definition's state while the old one keeps answering "
        "(`lambdactl views apply` builds it, then switches to it)",
    )


class ViewsBody(BaseModel):
    views: list[ViewInfo]


# --- built from answers ---------------------------------------------------------------------------


def provenance(p) -> dict[str, Any]:
    return {
        "batch_version": p.version,
        "cutoff": iso(p.cutoff_ms / 1000) if p.cutoff_ms else None,
        "complete": p.complete,
        "unavailable": p.unavailable,
        "reasons": p.reasons,
    }


def series_body(name: str, answer: SeriesAnswer, start_s: int, end_s: int) -> dict[str, Any]:
    distinct = answer.view.aggregation == "distinct"
    return {
        "view": name,
        "keys": answer.keys,
        "granularity": answer.granularity,
        "start": iso(start_s),
        "end": iso(end_s),
        "series": [
            {
                "bucket": iso(b.bucket),
                "value": round(b.value) if not distinct or b.exact else round(b.value, 1),
                "batch": b.batch,
                "speed": round(b.speed, 1) if distinct else b.speed,
                "exact": b.exact,
            }
            for b in answer.series.buckets
        ],
        "total": answer.series.total if not distinct or answer.series.exact else round(answer.series.total, 1),
        "exact": answer.series.exact,
        "provenance": provenance(answer.provenance),
    }


def top_body(name: str, answer: TopAnswer, limit: int) -> dict[str, Any]:
    rows = []
    for key, value, batch, speed in answer.rows:
        values = json.loads(key)
        rows.append({**dict(zip(answer.view.keys, values)), "value": value, "batch": batch, "speed": speed})
    return {
        "view": name,
        "granularity": answer.granularity,
        "start": iso(answer.start),
        "end": iso(answer.end),
        "limit": limit,
        "rows": rows,
        "provenance": provenance(answer.provenance),
    }
