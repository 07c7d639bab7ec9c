"""The real local stack, brought up once per run (idempotently), and a headless browser."""

from __future__ import annotations

import pytest

from definitions.settings import Settings


@pytest.fixture(scope="session")
def stack(settings: Settings):
    """The whole managed stack, healthy and bootstrapped. `up` is a no-op when it already runs."""
    from infra.stack import Stack

    stack = Stack(settings)
    stack.up()
    if "speed-layer" in settings.stack.managed_services:
        from stores.progress import read_progress

        running = read_progress(settings, "speed-layer")
        for name, ours in (
            ("ingest_bucket_s", settings.ingest_bucket_s),
            ("dedupe_window_s", settings.speed.dedupe_window_s),
        ):
            if running.get(name) != ours:
                pytest.exit(
                    f"the stack's speed layer runs with {name}={running.get(name)}, the tests with {ours}: "
                    "run `make down` and then `make test`",
                    returncode=2,
                )
    return stack


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium (Debian's package, installed by infra/setup.sh) driven by Playwright."""
    import shutil

    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    assert executable, "Debian's chromium is installed by infra/setup.sh"
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=executable,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def served_version(settings: Settings, stack, spark):
    """A batch version the pointer serves: the stack's current one, or one made now (a little traffic,
    archived past a cutoff, one full batch run), so no test depends on another having run first."""
    from batch_layer.job import run_batch
    from ingest.generator import GeneratorConfig
    from stores.batch_views import VersionStore
    from tests.support.events import send, wait_cutoff_past

    pointer = VersionStore(settings).pointer()
    if pointer is None:
        sent = send(settings, GeneratorConfig(seed=7, count=200, pages=5))
        wait_cutoff_past(settings, sent, timeout_s=240 + settings.ingest_bucket_s)
        run_batch(settings, spark=spark)
        pointer = VersionStore(settings).pointer()
    assert pointer is not None
    return pointer
