"""Accuracy reports: speed layer versus batch layer (JSON, with an HTML page alongside).

Stored, listed and read back by reports.storage, the one place reports live."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from fastapi import Path as PathParam
from fastapi.responses import StreamingResponse

from api.deps import DIGITS, SettingsDep
from api.errors import error_responses
from reports import storage

router = APIRouter(prefix="/api/v1/reports", tags=["reports"])
# Report pages are self-contained (inline CSS and SVG, no script): their policy allows no script at all.
REPORT_HTML_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}
ReportId = Annotated[
    str, PathParam(pattern=storage.ID_PATTERN, description="a report id, as GET /api/v1/reports lists")
]


def _stored(read, *args):
    try:
        return read(*args)
    except storage.InvalidReportId as exc:
        raise HTTPException(422, str(exc)) from None
    except storage.ReportNotFound as exc:
        raise HTTPException(404, str(exc)) from None
    except storage.ReportsBusy as exc:
        raise HTTPException(429, str(exc), headers={"Retry-After": "2"}) from None


@router.get("", summary="The accuracy reports, newest first", responses=error_responses(422, 429))
def list_reports(
    settings: SettingsDep, limit: Annotated[int, Query(ge=1, le=1000, description="at most this many"), DIGITS] = 100
) -> dict[str, Any]:
    return {
        "reports": [
            {
                "id": rid,
                "created": doc.get("created"),
                "window": doc.get("window"),
                "summary": doc.get("summary"),
                "json": f"/api/v1/reports/{rid}",
                "html": f"/api/v1/reports/{rid}/html",
            }
            for rid, doc in _stored(storage.list_summaries, settings, limit)
        ]
    }


@router.get(
    "/{report_id}",
    response_class=StreamingResponse,
    summary="One report as JSON",
    responses={
        200: {"content": {"application/json": {"schema": {"type": "object"}}}},
        **error_responses(404, 422, 429),
    },
)
def get_report(report_id: ReportId, settings: SettingsDep) -> StreamingResponse:
    # Sent as stored (checked once per file version): a report is megabytes, asked without a token.
    # From the file opened here: one the retention removes meanwhile is still sent whole.
    return _sent(_stored(storage.report_file, settings, report_id), report_id, "application/json")


def _sent(path: Path, report_id: str, media_type: str, headers: dict[str, str] | None = None) -> StreamingResponse:
    """The file, in chunks: a client reading slowly holds one chunk of it, not the whole."""
    try:
        handle = path.open("rb")
    except OSError:
        raise HTTPException(404, f"no report {report_id!r}") from None
    size = os.fstat(handle.fileno()).st_size

    def chunks() -> Iterator[bytes]:
        with handle:
            while data := handle.read(1 << 16):
                yield data

    return StreamingResponse(chunks(), media_type=media_type, headers={**(headers or {}), "Content-Length": str(size)})


@router.get(
    "/{report_id}/html",
    response_class=StreamingResponse,
    summary="One report as a self-contained HTML page",
    responses={200: {"content": {"text/html": {"schema": {"type": "string"}}}}, **error_responses(404, 422)},
)
def get_report_html(report_id: ReportId, settings: SettingsDep) -> StreamingResponse:
    # Sent in chunks like the JSON: a page is megabytes, asked without a token.
    path = _stored(storage.report_html_file, settings, report_id)
    return _sent(path, report_id, "text/html; charset=utf-8", REPORT_HTML_HEADERS)
