"""The scenario's whole-window report (tests/integration/reports/conftest.py) stored locally and on
HDFS, served by the API, and rendered as self-contained HTML in headless Chromium."""

from __future__ import annotations

import json

import httpx

from definitions.layer_settings import BatchSettings
from definitions.section import REPO_ROOT
from definitions.view_loading import load_views
from reports import storage
from reports.render import render_html
from stores.webhdfs import WebHdfs

REPORTS_PATH = BatchSettings().reports_path  # the default, which the tests' settings keep

ARTIFACTS = REPO_ROOT / "test-artifacts"


def test_the_report_is_stored_locally_and_on_hdfs_and_served(settings, scenario):
    report = scenario["full"]
    html = render_html(report)
    paths = storage.store_report(settings, report, html)
    assert json.loads(open(paths["json"]).read())["id"] == report["id"]
    assert open(paths["html"]).read() == html
    with WebHdfs(settings) as fs:
        assert json.loads(fs.read(f"{REPORTS_PATH}/{report['id']}.json"))["id"] == report["id"]
        assert fs.read(f"{REPORTS_PATH}/{report['id']}.html").decode() == html
    assert report["id"] in [r.report["id"] for r in storage.list_reports(settings, 20)]
    assert storage.read_report(settings, report["id"]) == json.loads(json.dumps(report, default=str))
    assert storage.read_report_html(settings, report["id"]) == html
    api = f"http://{settings.api.host}:{settings.api.port}/api/v1/reports"
    listed = httpx.get(api, timeout=30).json()["reports"]
    assert report["id"] in [r["id"] for r in listed]
    assert httpx.get(f"{api}/{report['id']}", timeout=30).json()["summary"] == json.loads(json.dumps(report["summary"]))
    page = httpx.get(f"{api}/{report['id']}/html", timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")


def test_the_html_report_renders_in_chromium(settings, scenario, browser):
    report = scenario["full"]
    html = render_html(report)
    assert "://" not in html and "<script" not in html.lower() and "<link" not in html.lower(), "self-contained"
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors, requests = [], []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("request", lambda req: requests.append(req.url))
    page.set_content(html, wait_until="load")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
    assert not errors, errors
    assert not [u for u in requests if not u.startswith(("about:", "data:"))], requests
    views = load_views(settings).names()
    for name in views:
        section = page.locator(f"section#view-{name}")
        assert section.count() == 1
        assert section.locator("svg").count() >= 3, f"{name}: error histogram, scatter plot, drift over time"
    assert page.locator("svg[aria-label='unique_visitors HLL relative error']").count() == 1
    assert page.locator("svg[aria-label='cells per cause']").count() == 1
    # matplotlib draws a scatter plot's points in the group named after the chart: one <path> each,
    # or, for many points, one <use> each of a marker defined once
    points = "svg g[id^='scatter-points-'] > path, svg g[id^='scatter-points-'] use"
    assert page.locator(points).count() > 10, "the scatter plots have points"
    assert page.get_by_text("measured 0").count() >= len(views), "late events shown as a measured zero"
    assert page.locator("section#view-page_views").get_by_text("duplicates beyond the window").count() >= 1
    assert (ARTIFACTS / "report.png").stat().st_size > 50_000
