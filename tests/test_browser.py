"""A real browser (Debian chromium driven by playwright): load the page, run an example, wait for the panels,
move the playhead, save a screenshot. Skips with the reason where chromium or playwright is missing."""

from __future__ import annotations

import os
import re
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


PLOTS = """() => [...document.querySelectorAll('.js-plotly-plot')].map(p => {
    const box = p.getBoundingClientRect();
    const title = (p.layout && p.layout.title && (p.layout.title.text ?? p.layout.title)) || '';
    // an array, or Plotly's typed-array form {dtype, bdata, shape} (decoded into _inputArray once drawn)
    const size = (a) => !a ? 0 : a.length ?? (a._inputArray ? a._inputArray.length
                                                           : String(a.shape || '0').split(',').reduce((n, d) => n * parseInt(d), 1));
    const points = (p.data || []).reduce((n, t) => n + (size(t.x) || size(t.z)), 0);
    return {title, points, visible: box.width > 100 && box.height > 100, legend: (p.data || []).map(t => t.name || ''),
            signature: title + JSON.stringify(p.data)};
})"""


def _plots(page) -> list[dict]:
    return page.evaluate(PLOTS)


def _count(legend: list[str], reason: str) -> int:
    """A reason's commit count from the timeline legend ('drift (36)')."""
    match = next((re.fullmatch(rf"{reason} \((\d+)\)", name) for name in legend if name.startswith(reason)), None)
    return int(match[1]) if match else 0


def _set_playhead(page, t: int) -> None:
    page.locator("input[type=range][aria-label*='Playhead']").first.fill(str(t))


def _wait_canvas_step(page, t: int) -> None:
    page.wait_for_function(
        "(t) => [...document.querySelectorAll('.js-plotly-plot .gtitle')]"
        ".some(e => e.textContent.startsWith(`Token canvas — step ${t}/`))", arg=t, timeout=30_000)


def test_run_the_default_prompt_and_scrub(page, tmp_path):
    run = page.get_by_role("button", name="Run", exact=True)
    box = run.bounding_box()
    assert box is not None and box["y"] + box["height"] <= 900, box  # Run is in the first 1440×900 viewport
    run.click()
    page.get_by_text("done", exact=True).wait_for(timeout=300_000)
    plots = _plots(page)
    assert len(plots) == 5, [p["title"] for p in plots]  # the canvas and the four views, all drawn with data
    assert all(p["visible"] and p["points"] > 0 for p in plots), [(p["title"], p["points"], p["visible"]) for p in plots]
    assert plots[0]["title"].startswith("Token canvas — step")
    timeline = next(p for p in plots if p["title"].startswith("Commit timeline"))
    assert _count(timeline["legend"], "drift") > 0 and _count(timeline["legend"], "suffix") > 0, timeline["legend"]
    steps = int(plots[0]["title"].split("/")[-1])
    _set_playhead(page, 1)  # the playhead moves every view
    _wait_canvas_step(page, 1)
    page.wait_for_timeout(500)
    moved = _plots(page)
    assert all(a["signature"] != b["signature"] for a, b in zip(plots, moved)), [p["title"] for p in moved]
    shot = Path(os.environ.get("POLESTAR_SCREENSHOTS", tmp_path)) / "main-view.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000 and steps >= 1


def test_stop_then_the_playhead_scrubs_the_stopped_run(page):
    # the baseline commits one token per step (256 forwards), so the run is still going when Stop lands; the
    # default example can finish between its first streamed frame and the click on a loaded machine
    home = page.url.split("?")[0]
    page.goto(home + "?method=baseline")
    page.wait_for_function("() => [...document.querySelectorAll('input')].some(i => i.value === 'baseline')",
                           timeout=30_000)
    page.get_by_role("button", name="Run", exact=True).click()
    page.locator("text=/^step \\d+$/").first.wait_for(timeout=60_000)  # streaming
    page.get_by_role("button", name="Stop", exact=True).click()
    page.get_by_text(re.compile(r"^stopped at step \d+$")).wait_for(timeout=60_000)
    status = page.get_by_text(re.compile(r"^stopped at step \d+$")).text_content()
    stopped = int(status.split()[-1])
    _wait_canvas_step(page, stopped)
    assert _plots(page)[0]["title"] == f"Token canvas — step {stopped}/{stopped}"
    _set_playhead(page, 1)
    _wait_canvas_step(page, 1)
    assert _plots(page)[0]["title"] == f"Token canvas — step 1/{stopped}"
    assert stopped < 256  # it stopped before the end
    page.goto(home)  # the next tests start from the defaults


def test_a_deep_link_restores_the_method_and_a_setting(page):
    page.goto(page.url.split("?")[0] + "?method=fast-dllm&tau_s=0.8")
    method = page.get_by_label("Method")
    page.wait_for_function("() => [...document.querySelectorAll('input')].some(i => i.value === 'fast-dllm')",
                           timeout=30_000)
    assert method.input_value() == "fast-dllm"
    page.get_by_text("Hyperparameters").click()
    tau = page.locator("input[type=number][aria-label*='tau_s']").first
    tau.wait_for(timeout=30_000)
    assert float(tau.input_value()) == 0.8, [(e.get_attribute("aria-label"), e.input_value())
                                             for e in page.locator("input[type=number]").all()]


CELL_CENTRE = """([block, offset]) => {
    const p = document.querySelector('#token-canvas .js-plotly-plot');
    const box = p.getBoundingClientRect(), size = p._fullLayout._size;
    return {x: box.x + size.l + p._fullLayout.xaxis.l2p(offset), y: box.y + size.t + p._fullLayout.yaxis.l2p(block)};
}"""
MARKS = """() => [...document.querySelectorAll('.js-plotly-plot')].map(p => ({
    title: (p.layout.title && (p.layout.title.text ?? p.layout.title)) || '',
    shapes: (p.layout.shapes || []).length, names: (p.data || []).map(t => t.name || '')}))"""


def test_a_click_on_a_canvas_cell_selects_that_position_in_every_view(page):
    page.get_by_role("button", name="Run", exact=True).click()
    page.locator("text=/^step \\d+$/").first.wait_for(timeout=60_000)  # this run streams (not an earlier "done")
    page.get_by_text("done", exact=True).wait_for(timeout=300_000)
    block, offset = 0, 5  # committed in every finished run: the first block is decoded first
    centre = page.evaluate(CELL_CENTRE, [block, offset])
    page.mouse.click(centre["x"], centre["y"])
    field = page.locator("#selected-position textarea, #selected-position input").first
    page.wait_for_function("() => document.querySelector('#selected-position textarea, #selected-position input')"
                           ".value === '5'", timeout=30_000)
    assert field.input_value() == "5"
    page.wait_for_function("() => [...document.querySelectorAll('.js-plotly-plot')]"
                           ".some(p => (p.data || []).some(t => t.name === 'pos 5 (selected)'))", timeout=30_000)
    marks = {m["title"].split(" —")[0]: m for m in page.evaluate(MARKS)}
    assert marks["Token canvas"]["shapes"] == 1, marks  # the cell's outline
    assert marks["Attention drift"]["shapes"] == 1, marks  # its row
    assert marks["Commit timeline"]["shapes"] == 1 and "pos 5" in marks["Commit timeline"]["names"], marks
    assert marks["KV staleness against a full recompute"]["shapes"] == 1, marks  # its commit step
    assert "pos 5 (selected)" in marks["Value-state trajectories (PCA, fixed basis)"]["names"], marks
    field.fill("")  # clearing the field clears every mark
    field.press("Enter")
    page.wait_for_function("() => ![...document.querySelectorAll('.js-plotly-plot')]"
                           ".some(p => (p.layout.shapes || []).length)", timeout=30_000)
