"""Export and import of runs: a parquet trace (one row per step, run metadata in the file's schema metadata)
that loads back into a browsable RunRecord, and a self-contained HTML report of the panels with its own playhead."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from app import figures
from app.record import RunRecord
from polestar.config import DecodeConfig, upgrade_names
from polestar.trace import Commit, StepEvent

META_KEY = b"polestar_run"
COLUMNS = ("block", "step", "nfe", "kind", "rows", "ms", "canvas", "drift", "commits", "extra")
VALUE_POSITIONS = 32  # value states (PCA panel) are kept for the first 32 generated positions: ~0.5 MB per run


class RunFileError(ValueError):
    """An uploaded file is not a Polestar run."""


def save_parquet(rec: RunRecord, path: str | Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    events = rec.events
    table = pa.table({
        "block": [e.block for e in events], "step": [e.step for e in events], "nfe": [e.nfe for e in events],
        "kind": [e.kind for e in events], "rows": [e.rows for e in events], "ms": [e.ms for e in events],
        "canvas": [c.astype(np.int32).tolist() for c in rec.canvases],
        "drift": [d.astype(np.float32).ravel().tolist() for d in rec.drift] if rec.drift else [[] for _ in events],
        "commits": [json.dumps([c.__dict__ for c in e.commits]) for e in events],
        "extra": [json.dumps(e.extra) for e in events],
        "values": [v[:VALUE_POSITIONS].astype(np.float16).tobytes() for v in rec.values]
        if len(rec.values) == len(events) else [b"" for _ in events],
    })
    meta = {"label": rec.label, "config": {k: str(v) if not isinstance(v, (int, float, bool)) else v
                                           for k, v in rec.config.__dict__.items()},
            "prompt_len": rec.prompt_len, "metrics": rec.metrics, "vocab": rec.vocab, "mask_id": rec.mask_id,
            "eos_id": rec.eos_id, "layers": int(rec.drift[0].shape[0]) if rec.drift else 0,
            "value_dim": int(rec.values[0].shape[-1]) if rec.values else 0}
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()})
    path = Path(path)
    pq.write_table(table, path)
    return path


def load_parquet(path: str | Path) -> RunRecord:
    """Read a run saved by `save_parquet`; anything else raises RunFileError with what is wrong."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise RunFileError(f"not a parquet file ({type(exc).__name__}): export a run with 'Download trace'") from exc
    meta = (table.schema.metadata or {}).get(META_KEY)
    missing = [c for c in COLUMNS if c not in table.column_names]
    if meta is None or missing:
        raise RunFileError("this parquet file is not a Polestar Studio run"
                           + (f" (missing columns: {', '.join(missing)})" if missing else " (no run metadata)"))
    meta = json.loads(meta)
    try:
        cfg = DecodeConfig(**upgrade_names(meta["config"], warn=False))
    except Exception as exc:
        raise RunFileError(f"the run's config is invalid: {exc}") from exc
    rows = table.to_pylist()
    rec = RunRecord(label=meta["label"], config=cfg, prompt_len=meta["prompt_len"], metrics=meta["metrics"],
                    vocab=meta["vocab"], mask_id=meta["mask_id"], eos_id=meta["eos_id"], done=True)
    layers = meta["layers"]
    for r in rows:
        commits = [Commit(**c) for c in json.loads(r["commits"])]
        rec.events.append(StepEvent(block=r["block"], step=r["step"], nfe=r["nfe"], kind=r["kind"], rows=r["rows"],
                                    commits=commits, refreshed_positions=[], refreshed_layers=[], ms=r["ms"],
                                    extra=json.loads(r["extra"])))
        rec.canvases.append(np.asarray(r["canvas"], dtype=np.int32))
        if layers and r["drift"]:
            rec.drift.append(np.asarray(r["drift"], dtype=np.float32).reshape(layers, -1))
        if meta.get("value_dim") and r.get("values"):  # optional: files from before it existed have none
            rec.values.append(np.frombuffer(r["values"], dtype=np.float16).reshape(-1, meta["value_dim"]))
    if any(len(c) != cfg.gen_length for c in rec.canvases):
        raise RunFileError("the canvases do not match the run's gen_length: the file is damaged")
    return rec


REPORT_FRAMES = 40  # steps a report can show: evenly spaced, the last one always (a few MB at generation 256)

REPORT_PAGE = """<!doctype html><html><head><meta charset='utf-8'><title>Polestar run: {title}</title>
<style>body{{font-family:Helvetica,Arial,sans-serif;margin:24px;color:#2a3f5f}}
#bar{{position:sticky;top:0;background:white;padding:8px 0;z-index:9}} #playhead{{width:60%}}
.grid{{display:grid;grid-template-columns:1fr 1fr;gap:12px}} .wide{{grid-column:1 / span 2}}</style>
<script>{plotly}</script></head><body>
<h1>Polestar Studio run: {title}</h1><pre>{metrics}</pre>
<div id='bar'><label>Playhead (step) <input id='playhead' type='range' min='0' max='{last}' value='{last}'></label>
<span id='step'></span></div><div class='grid'>{divs}</div>
<script>
const STEPS = {steps};
const FRAMES = {frames};
function show(i) {{
  for (const [id, figures] of Object.entries(FRAMES)) Plotly.react(id, figures[i].data, figures[i].layout);
  document.getElementById('step').textContent = `step ${{STEPS[i]}} of ${{STEPS[STEPS.length - 1]}}`;
}}
document.getElementById('playhead').addEventListener('input', (e) => show(Number(e.target.value)));
show(STEPS.length - 1);
</script></body></html>"""


def report_steps(n_steps: int, most: int = REPORT_FRAMES) -> list[int]:
    """The steps a report shows: all of them up to `most`, else `most` evenly spaced ending at the last."""
    if n_steps <= most:
        return list(range(1, n_steps + 1))
    return sorted({1 + round(i * (n_steps - 1) / (most - 1)) for i in range(most)})


def html_report(rec: RunRecord, layer: int | None = None) -> str:
    """One self-contained HTML page: plotly.js inlined, every panel precomputed at up to REPORT_FRAMES steps, and a
    playhead of its own that redraws them all in the browser (no server). `layer`: the drift heatmap's (default:
    the last)."""
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    panels = {"canvas": lambda t: figures.token_canvas(rec, t)}
    if rec.drift:
        shown = len(rec.drift[0]) - 1 if layer is None else min(layer, len(rec.drift[0]) - 1)
        panels["drift"] = lambda t: figures.drift_heatmap(rec, shown, t)
    panels["timeline"] = lambda t: figures.commit_timeline(rec, t)
    panels["staleness"] = lambda t: figures.staleness_curves(rec, t)
    if len(rec.values) >= 2:
        panels["pca"] = lambda t: figures.pca_trajectories(rec, [0, 1, 2, 3], t)
    steps = report_steps(rec.n_steps)
    frames = {name: [json.loads(pio.to_json(draw(t), validate=False)) for t in steps] for name, draw in panels.items()}
    divs = "".join(f"<div id='{name}' class='{'wide' if name == 'canvas' else ''}'></div>" for name in panels)
    safe = lambda value: json.dumps(value).replace("</", "<\\/")  # noqa: E731 — nothing closes the script tag
    title = rec.label.replace("<", "&lt;")
    metrics = json.dumps(rec.metrics, indent=1).replace("<", "&lt;")
    return REPORT_PAGE.format(title=title, plotly=get_plotlyjs(), metrics=metrics, last=len(steps) - 1,
                              divs=divs, steps=safe(steps), frames=safe(frames))
