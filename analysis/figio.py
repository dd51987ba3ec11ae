"""Shared command line and outputs of the paper-figure scripts (`analysis/fig*.py`).

Every script is `python -m analysis.<name> --n N --out DIR` and writes into DIR: `<name>.csv` (the measured rows),
`<name>.json` (the summary its findings line is built from), `<name>.html` (the Plotly figure) and `<name>.png`
(the same figure rendered by headless chromium, when it is installed; `--no-png` skips it).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shutil
import statistics
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports" / "figures"


def parser(description: str, n: int, task: str = "arith") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--n", type=int, default=n, help="held-out examples")
    p.add_argument("--out", type=Path, default=REPORTS, help="output folder")
    p.add_argument("--task", default=task, help="task suite (polestar.tasks)")
    p.add_argument("--gen-length", type=int, default=256)
    p.add_argument("--model", default=None, help="checkpoint directory (default: the embedded model)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads (0: one for a small model on a CPU, else torch's default)")
    p.add_argument("--no-png", action="store_true", help="write no PNG (no chromium needed)")
    return p


_MODELS: dict[str, object] = {}  # loaded once per process (`analysis.drift_figures` runs several scripts)


def setup(args):
    """Quiet OpenMP, load the model (once per process), set the decode threads; returns the model."""
    from polestar.threads import quiet_openmp, set_decode_threads

    quiet_openmp()
    import polestar

    path = args.model or polestar.DEFAULT_MODEL
    if path not in _MODELS:
        _MODELS[path] = polestar.load_model(path)
    set_decode_threads(_MODELS[path], args.threads)
    return _MODELS[path]


def examples(args):
    from polestar import tasks

    return tasks.make(args.task, args.n, 0)


def model_label(path: str | None) -> str:
    """How a summary names its weights: the path given, or the embedded model's (None)."""
    return path or "embedded (assets/models/polestar-tiny)"


def weights_key(path: str | None) -> str:
    """Which weights a summary was measured with (the bench rows' key: 16 hex digits of their sha256), so that
    `analysis.findings` never presents a figure measured on weights no longer shipped."""
    import polestar
    from polestar import bench

    return bench.weights_key(path or polestar.DEFAULT_MODEL)


def settings(n: int, task: str, gen_length: int, model_path: str | None) -> dict[str, Any]:
    """The `settings` block of a summary JSON: what was measured, on which model and which weights."""
    return {"n": n, "task": task, "gen_length": gen_length, "model": model_label(model_path),
            "weights": weights_key(model_path)}


def write(args, name: str, rows: list[dict[str, Any]], summary: dict[str, Any], fig) -> Path:
    """Write the CSV, the summary JSON (with the command's settings), the HTML and (unless --no-png) the PNG."""
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if rows:
        with (out / f"{name}.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for row in rows for k in row)), restval="")
            writer.writeheader()
            writer.writerows(rows)
    measured = settings(args.n, args.task, args.gen_length, args.model)
    (out / f"{name}.json").write_text(json.dumps({"settings": measured, **summary}, indent=2, default=_plain) + "\n")
    fig.write_html(out / f"{name}.html", include_plotlyjs="cdn")
    if not args.no_png:
        png(fig, out / f"{name}.png")
    return out


def png(fig, path: Path, width: int = 1100, height: int | None = None) -> bool:
    """Render `fig` to `path` in headless chromium (plotly.js inlined: no network). False without chromium."""
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        print(f"chromium is not installed: {path.name} not rendered (apt-get install -y chromium)")
        return False
    from playwright.sync_api import sync_playwright

    height = height or int(fig.layout.height or 500)
    html = fig.to_html(include_plotlyjs=True, full_html=True, config={"staticPlot": True})
    with sync_playwright() as pw:
        from analysis.app_screenshots import ARGS  # the analysis scripts' one set of chromium flags

        browser = pw.chromium.launch(executable_path=chromium, args=ARGS)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.set_content(html)
        page.wait_for_selector(".js-plotly-plot .main-svg")
        page.screenshot(path=str(path), full_page=True)
        browser.close()
    return True


def finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def mean(values) -> float:
    """The mean, NaN for no values (an empty group in a summary)."""
    values = list(values)
    return statistics.fmean(values) if values else float("nan")


def ci95(values) -> float:
    """Half-width of a normal 95 % interval of the mean (0 for fewer than two values)."""
    values = list(values)
    return 1.96 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) >= 2 else 0.0


def _plain(value):
    return float(value) if hasattr(value, "__float__") else str(value)
