"""The dashboard in headless Chromium (Debian's package), driven by Playwright; a screenshot is kept."""

from __future__ import annotations

from definitions.settings import REPO_ROOT

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
