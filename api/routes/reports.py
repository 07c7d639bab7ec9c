"""Accuracy reports: speed layer versus batch layer (JSON, with an HTML page alongside)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse

from api.deps import SettingsDep
from api.errors import error_responses
from definitions.settings import Settings

router = APIRouter(prefix="/api/v1/reports", tags=["reports"])
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
# Report pages are self-contained (inline CSS and SVG, no script): their policy allows no script at all.
REPORT_HTML_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}
ReportId = Annotated[str, PathParam(pattern=_ID.pattern, description="a report id, as GET /api/v1/reports lists")]


def reports_dir(settings: Settings) -> Path:
    return settings.state_dir / "reports"


def _report_path(settings: Settings, report_id: str, suffix: str) -> Path:
    if not _ID.match(report_id):
        raise HTTPException(422, f"bad report id {report_id!r}")
    path = reports_dir(settings) / f"{report_id}{suffix}"
    if not path.is_file():
        raise HTTPException(404, f"no report {report_id!r}")
    return path


@router.get("", summary="The accuracy reports, newest first")
def list_reports(settings: SettingsDep) -> dict[str, Any]:
    folder = reports_dir(settings)
    items = []
    for path in sorted(folder.glob("*.json"), reverse=True) if folder.is_dir() else []:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        items.append(
            {
                "id": path.stem,
                "created": doc.get("created"),
                "window": doc.get("window"),
                "summary": doc.get("summary"),
                "json": f"/api/v1/reports/{path.stem}",
                "html": f"/api/v1/reports/{path.stem}/html",
            }
        )
    return {"reports": items}


@router.get("/{report_id}", summary="One report as JSON", responses=error_responses(404, 422))
def get_report(report_id: ReportId, settings: SettingsDep) -> dict[str, Any]:
    return json.loads(_report_path(settings, report_id, ".json").read_text())


@router.get(
    "/{report_id}/html",
    response_class=HTMLResponse,
    summary="One report as a self-contained HTML page",
    responses=error_responses(404, 422),
)
def get_report_html(report_id: ReportId, settings: SettingsDep) -> HTMLResponse:
    return HTMLResponse(_report_path(settings, report_id, ".html").read_text(), headers=REPORT_HTML_HEADERS)
