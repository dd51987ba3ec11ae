"""A real browser (Debian chromium driven by playwright): load the page, run an example, wait for the panels,
move the playhead, save a screenshot. Skips with the reason where chromium or playwright is missing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import polestar

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed (apt-get install -y chromium); .ci/run installs it")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    os.environ.setdefault("GRADIO_TEMP_DIR", str(tmp_path_factory.mktemp("gradio")))
    import app

    demo = app.create_app(polestar.DEFAULT_MODEL)
    demo.queue(default_concurrency_limit=4).launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        tab = browser.new_page(viewport={"width": 1440, "height": 900})
        tab.goto(demo.local_url)
        yield tab
        browser.close()
    demo.close()


def test_run_an_example_and_scrub(page, tmp_path):
    run = page.get_by_role("button", name="Run", exact=True)
    box = run.bounding_box()
    assert box is not None and box["y"] + box["height"] <= 900, box  # Run is in the first 1440×900 viewport
    run.click()
    page.get_by_text("done", exact=True).wait_for(timeout=120_000)
    assert page.locator(".js-plotly-plot").count() >= 5  # the canvas and the four views, all drawn
    title = page.locator(".js-plotly-plot .gtitle").first.text_content()
    assert title.startswith("Token canvas — step")
    steps = int(title.split("/")[-1])
    page.locator("input[type=range][aria-label*='Playhead']").first.fill("1")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]"
        ".some(t => t.textContent.startsWith('Token canvas — step 1/'))", timeout=30_000)
    shot = Path(os.environ.get("POLESTAR_SCREENSHOTS", tmp_path)) / "main-view.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000 and steps >= 1
