"""Screenshots of the app for the README: the main view after a run, a comparison and a sweep.

    python -m analysis.app_screenshots   # writes docs/screenshots/{main,compare,sweep}.png (needs chromium)
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


# the page position of the first canvas cell whose reason index is `reason` (row-major, as positions are)
FIRST_DRIFT_CELL = """(reason) => {
    const p = document.querySelector('#token-canvas .js-plotly-plot');
    const z = p.calcdata[0][0].z, size = p._fullLayout._size, box = p.getBoundingClientRect();  // drawn: 2-D
    for (let row = 0; row < z.length; row++) for (let col = 0; col < z[row].length; col++)
        if (z[row][col] === reason) return {x: box.x + size.l + p._fullLayout.xaxis.l2p(col),
                                            y: box.y + size.t + p._fullLayout.yaxis.l2p(row)};
    return null;
}"""


def main() -> None:
    from playwright.sync_api import sync_playwright

    import app
    import polestar
    from app.record import REASONS

    out = ROOT / "docs" / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    demo = app.create_app(polestar.DEFAULT_MODEL)
    demo.queue().launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(demo.local_url)
        page.get_by_role("button", name="Run", exact=True).click()
        page.get_by_text("done", exact=True).wait_for(timeout=180_000)
        # select the first drift-committed cell, as a user clicking it would: every view then marks it
        cell = page.evaluate(FIRST_DRIFT_CELL, REASONS.index("drift"))
        if cell is not None:
            page.mouse.click(cell["x"], cell["y"])
            page.wait_for_function("() => [...document.querySelectorAll('.js-plotly-plot')]"
                                   ".some(p => (p.data || []).some(t => (t.name || '').endsWith('(selected)')))",
                                   timeout=60_000)
            page.wait_for_timeout(1000)
        page.screenshot(path=str(out / "main.png"), full_page=True)
        page.get_by_role("tab", name="Compare").click()
        page.get_by_role("button", name="Compare", exact=True).click()
        # the Run tab's plots already count as drawn: wait for the comparison's own axis, then for every
        # "processing" overlay to go
        page.wait_for_function("() => [...document.querySelectorAll('.js-plotly-plot .ytitle')]"
                               ".some(t => t.textContent.includes('commit step B'))", timeout=180_000)
        page.wait_for_function("() => ![...document.querySelectorAll('.progress-text, .eta-bar, .meta-text')]"
                               ".some(e => e.offsetParent !== null && e.textContent.includes('processing'))",
                               timeout=180_000)
        page.wait_for_timeout(1500)
        page.screenshot(path=str(out / "compare.png"), full_page=True)
        page.get_by_role("tab", name="Sweep").click()
        page.get_by_role("button", name="Sweep", exact=True).click()
        page.wait_for_function(
            "() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]"
            ".some(t => t.textContent.includes('sweeping'))",
            timeout=300_000)
        page.wait_for_timeout(1000)
        page.screenshot(path=str(out / "sweep.png"), full_page=True)
        browser.close()
    demo.close()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
