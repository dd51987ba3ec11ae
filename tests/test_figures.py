"""Panels are pure functions of a RunRecord: check what they draw on a real (tiny) run."""

from __future__ import annotations

import threading

import numpy as np

from app import figures
from app.runner import ModelHost, stream_run
from polestar.config import resolve
from tests.tiny_checkpoints import write_checkpoint


def test_panels_from_a_streamed_run(tmp_path):
    host = ModelHost(str(write_checkpoint(tmp_path / "m", "llada")))
    cfg = resolve("polestar", gen_length=16, block_length=8, tau_s=0.3, measure_staleness=True)
    frames = list(stream_run(host, "the cat sat", cfg, "polestar", threading.Event(), frame_s=0.0))
    rec = frames[-1]
    assert rec.done and rec.n_steps == rec.metrics["nfe"] == len(rec.canvases) == len(rec.drift)
    assert rec.drift[0].shape == (2, 16) and rec.values[0].shape[0] == 16
    canvas = figures.token_canvas(rec)
    assert canvas.data[0].z.shape == (2, 8) and not (canvas.data[0].z == 0).any()  # everything committed
    early = figures.token_canvas(rec, 1)
    assert (early.data[0].z == 0).sum() > 0  # the playhead shows masks at step 1
    drift = figures.drift_heatmap(rec, 1)
    assert drift.data[0].z.shape == (16, rec.n_steps)
    timeline = figures.commit_timeline(rec)
    assert sum(len(t.x) for t in timeline.data[:-1]) == 16  # one marker per committed token
    stale = figures.staleness_curves(rec)
    assert len(stale.data) == 2 and np.isfinite(np.asarray(stale.data[0].y, dtype=float)).all()
    pca = figures.pca_trajectories(rec, [0, 5])
    assert len(pca.data) >= 2
    assert all(f.layout.uirevision for f in (canvas, drift, timeline, stale, pca))


def test_stop_ends_the_run_early(tmp_path):
    host = ModelHost(str(write_checkpoint(tmp_path / "m", "dream")))
    stop = threading.Event()
    stop.set()
    rec = list(stream_run(host, "the cat", resolve("baseline", gen_length=16, block_length=8), "b", stop))[-1]
    assert rec.n_steps == 1 and rec.metrics["stopped"]


def test_run_export_import_round_trip_and_bad_files(tmp_path):
    import pytest

    from app import runio

    host = ModelHost(str(write_checkpoint(tmp_path / "m", "llada")))
    cfg = resolve("polestar", gen_length=16, block_length=8, tau_s=0.3)
    rec = list(stream_run(host, "the cat sat", cfg, "polestar", threading.Event(), frame_s=0.0))[-1]
    path = runio.save_parquet(rec, tmp_path / "run.parquet")
    back = runio.load_parquet(path)
    assert back.n_steps == rec.n_steps and back.config == rec.config and back.metrics == rec.metrics
    assert all((a == b).all() for a, b in zip(back.canvases, rec.canvases))
    assert all(np.allclose(a, b) for a, b in zip(back.drift, rec.drift))
    assert len(back.values) == rec.n_steps and all(np.array_equal(a, b[: runio.VALUE_POSITIONS])
                                                   for a, b in zip(back.values, rec.values))
    assert figures.pca_trajectories(back, [0, 1]).data  # the PCA panel works on a loaded trace
    assert [c.reason for e in back.events for c in e.commits] == [c.reason for e in rec.events for c in e.commits]
    html = runio.html_report(back)
    assert html.startswith("<!doctype html>") and "Plotly" in html and "id='playhead'" in html
    import json

    steps = json.loads(html.split("const STEPS = ", 1)[1].split(";\n", 1)[0])
    frames = json.loads(html.split("const FRAMES = ", 1)[1].split(";\n", 1)[0].replace("<\\/", "</"))
    assert steps == runio.report_steps(back.n_steps) and steps[-1] == back.n_steps  # its own playhead, every step
    assert set(frames) == {"canvas", "drift", "timeline", "staleness", "pca"}
    assert all(len(f) == len(steps) for f in frames.values())
    assert [f["layout"]["title"]["text"] for f in frames["canvas"]] == [
        f"Token canvas — step {t}/{back.n_steps}" for t in steps]
    assert runio.report_steps(100, 40)[-1] == 100 and len(runio.report_steps(100, 40)) == 40
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(runio.RunFileError, match="not a parquet file"):
        runio.load_parquet(tmp_path / "bad.parquet")
    import pandas as pd

    pd.DataFrame({"a": [1]}).to_parquet(tmp_path / "other.parquet")
    with pytest.raises(runio.RunFileError, match="not a Polestar Studio run"):
        runio.load_parquet(tmp_path / "other.parquet")


def test_probe_drift_and_reused_staleness_reference_equal_their_definitions(tmp_path):
    """The probe's cached-logarithm KL is kl_drift's number, and the staleness measured against the probe's own
    forward (`staleness_reference`) equals the staleness probe's separate recompute, step by step."""
    import torch

    import polestar
    from polestar.api import encode_prompt
    from polestar.clustering import kl_drift
    from polestar.probe import AttentionProbe

    model = polestar.load_model(write_checkpoint(tmp_path / "m", "llada"), dtype=torch.float64)
    ids = encode_prompt(model, "the cat sat")
    probe = AttentionProbe(model, ids.shape[1])
    canvases, frames = [], []

    def on_step(event, canvas):
        canvases.append(canvas.clone())
        frames.append(probe(canvas))

    cfg = resolve("polestar", gen_length=16, block_length=8, tau_s=0.3, measure_staleness=True)
    reused = polestar.generate(model, ids, cfg, on_step=on_step, staleness_reference=probe.reference)
    alone = polestar.generate(model, ids, cfg, trace=True)
    assert reused.text == alone.text
    for a, b in zip(reused.trace.events, alone.trace.events, strict=True):  # fp64: the same forward, same numbers
        np.testing.assert_allclose(a.extra["staleness"], b.extra["staleness"], rtol=0, atol=1e-12)
    for t in (1, len(canvases) - 1):
        attn = [model.run(c, cache=model.new_cache(1, c.shape[1]), output_attentions=True).attentions
                for c in (canvases[t - 1], canvases[t])]
        want = torch.stack([kl_drift(now[0, :, ids.shape[1]:].transpose(0, 1), before[0, :, ids.shape[1]:]
                                     .transpose(0, 1)) for before, now in zip(*attn)])
        # both are fp32 sums over the same clamped fp32 probabilities; only the summation order may differ: a few
        # ulps (fp32 eps 1.2e-7) of each KL
        torch.testing.assert_close(frames[t].drift, want.float(), rtol=8 * 1.2e-7, atol=1e-9)


def test_unvalidated_figures_send_their_dicts_as_they_are():
    """The run views skip plotly's validation (`figures._figure`): the JSON must still be the dicts given, with
    numpy arrays as typed arrays and no default template sneaking in."""
    import json

    z = np.arange(6, dtype=np.float32).reshape(2, 3)
    fig = figures._figure([dict(type="heatmap", z=z, colorscale=figures._scale("Magma"))],
                          figures._layout("t", 300, "k", yaxis=dict(title=figures._title("y"))))
    sent = json.loads(fig.to_json())
    assert sent["layout"]["template"] == {} and sent["layout"]["title"] == {"text": "t"}
    assert sent["layout"]["yaxis"] == {**figures.AXIS, "title": {"text": "y"}}
    assert sent["data"][0]["z"]["dtype"] == "f4" and sent["data"][0]["colorscale"][0][1].startswith("#")
    assert np.array_equal(fig.data[0].z, z)
