"""The dashboard in headless Chromium (Debian's package), driven by Playwright; a screenshot is kept."""

from __future__ import annotations

from definitions.section import REPO_ROOT

ARTIFACTS = REPO_ROOT / "test-artifacts"


def test_dashboard_shows_merged_series_top_pages_and_status(settings, stack, browser):
    import httpx
    from playwright.sync_api import expect

    base = f"http://{settings.api.host}:{settings.api.port}"
    status = httpx.get(f"{base}/api/v1/status", timeout=30).json()
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{base}/", wait_until="networkidle")
    page.wait_for_selector("#chart rect", state="attached", timeout=60_000)
    page.wait_for_selector("#top tbody tr", timeout=60_000)
    # Show the busiest page of the window: its series has bars to look at.
    busiest = page.locator("#top tbody tr a").first
    url = busiest.get_attribute("data-url")
    busiest.click()
    # Waits through selectors: the page's Content-Security-Policy refuses the eval behind a string wait_for_function.
    expect(page.locator("#url")).to_have_value(url)
    expect(page.locator("#chart")).to_have_attribute("data-url", url, timeout=60_000)
    page.wait_for_selector('#chart rect:not([height="0"])', state="attached", timeout=60_000)
    expect(page.locator("#st-version")).not_to_have_text("–", timeout=60_000)
    # Each view's state, from GET /api/v1/views.
    expect(page.locator('#views tbody tr[data-view="page_views"] td').nth(1)).to_have_text("serving", timeout=60_000)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

    assert not errors, errors
    assert page.locator("#chart rect.batch").count() > 0 and page.locator("#chart rect.speed").count() > 0
    assert page.locator("#top tbody tr").count() >= 3
    assert page.locator("#pv-error").inner_text() == ""
    if status.get("batch"):
        assert page.locator("#st-version").inner_text() == f"v{status['batch']['version']}"
    if (status.get("views") or {}).get("page_views", {}).get("batch_version"):
        assert page.locator("#cutoff-line").count() == 1, "the batch cutoff is marked on the series"
    if not status.get("batch"):
        assert page.locator("#st-version").inner_text() == "none yet"
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 10_000


def test_dashboard_says_what_it_cannot_read_and_shows_only_the_url_asked_for_last(settings, stack, browser):
    """The page's own handling of the API's answers (each crafted here through the browser's
    routing; the page, its script and the rest of the API are the real ones): a store the status
    cannot read is said so, not shown as "none yet" or "not running"; a status that cannot be read
    is not left on screen as current; and the answer of an earlier "Show", arriving after a later
    one's, does not replace the chart of the URL asked for last."""
    import json

    from playwright.sync_api import expect

    base = f"http://{settings.api.host}:{settings.api.port}"
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    status = {
        "body": json.dumps(
            {
                "batch": {"error": "hbase cannot be read", "component": "hbase"},
                "speed": {"running": False, "error": "the speed layer's progress cannot be read"},
            }
        ),
        "code": 200,
    }
    page.route(
        "**/api/v1/status",
        lambda route: route.fulfill(status=status["code"], body=status["body"], content_type="application/json"),
    )
    held = []  # the page_views answers of /held, answered only when the test says

    def page_views(route):
        if "url=%2Fheld" in route.request.url:
            held.append(route)
        else:
            route.continue_()

    page.route("**/api/v1/views/page_views?*", page_views)
    page.goto(f"{base}/", wait_until="domcontentloaded")
    expect(page.locator("#st-version")).to_have_text("cannot be read", timeout=30_000)
    expect(page.locator("#st-fresh")).to_have_text("cannot be read")
    expect(page.locator("#st-error")).to_contain_text("hbase cannot be read")

    page.fill("#url", "/held")
    page.click("#go")
    page.wait_for_timeout(0)
    expect(page.locator("#url")).to_have_value("/held")
    page.fill("#url", "/")
    page.click("#go")
    expect(page.locator("#chart")).to_have_attribute("data-url", "/", timeout=60_000)
    assert held, "the /held request was made"
    try:
        held[0].fulfill(
            status=200,
            content_type="application/json",
            body=json.dumps(
                {
                    "series": [{"bucket": "2026-01-01T00:00:00Z", "value": 9}],
                    "total": 9,
                    "granularity": "hour",
                    "provenance": {"complete": True},
                }
            ),
        )
    except Exception:  # the page aborted that request: nothing can arrive late
        pass
    page.wait_for_load_state("networkidle")
    assert page.locator("#chart").get_attribute("data-url") == "/", "an earlier Show's late answer replaced the chart"
    assert "9 in the window" not in page.locator("#pv-total").inner_text()

    status.update(code=503, body=json.dumps({"detail": "the API is restarting"}))
    page.evaluate("loadStatus()")
    expect(page.locator("#st-error")).to_contain_text("status cannot be read", timeout=30_000)
    assert page.locator("#st-version").inner_text() == "–", "what the status said before is not shown as current"
    assert not errors, errors
