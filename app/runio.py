"""Export and import of runs: a parquet trace (one row per step, run metadata in the file's schema metadata)
that loads back into a browsable RunRecord, and a self-contained HTML report of the panels."""

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


def html_report(rec: RunRecord, layer: int = 0) -> str:
    """One self-contained HTML page (plotly.js inlined once) with every panel at the final step."""
    figs = [figures.token_canvas(rec), figures.commit_timeline(rec), figures.staleness_curves(rec)]
    if rec.drift:
        figs.insert(1, figures.drift_heatmap(rec, min(layer, len(rec.drift[0]) - 1)))
    body = "".join(f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs))
    metrics = json.dumps(rec.metrics, indent=1)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Polestar run: {rec.label}</title></head>"
            f"<body><h1>Polestar Studio run: {rec.label}</h1><pre>{metrics}</pre>{body}</body></html>")
