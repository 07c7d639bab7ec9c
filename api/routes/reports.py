"""Accuracy reports: speed layer versus batch layer (JSON, with an HTML page alongside)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import HTMLResponse

from api.deps import SettingsDep
from definitions.settings import Settings

router = APIRouter(prefix="/api/v1/reports", tags=["reports"])
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


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
        items.append({"id": path.stem, "created": doc.get("created"), "window": doc.get("window"),
                      "summary": doc.get("summary"), "json": f"/api/v1/reports/{path.stem}",
                      "html": f"/api/v1/reports/{path.stem}/html"})
    return {"reports": items}


@router.get("/{report_id}", summary="One report as JSON")
def get_report(report_id: str, settings: SettingsDep) -> dict[str, Any]:
    return json.loads(_report_path(settings, report_id, ".json").read_text())


@router.get("/{report_id}/html", response_class=HTMLResponse, summary="One report as a self-contained HTML page")
def get_report_html(report_id: str, settings: SettingsDep) -> HTMLResponse:
    return HTMLResponse(_report_path(settings, report_id, ".html").read_text())
