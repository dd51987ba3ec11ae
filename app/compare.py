"""The Compare tab: two configurations on the same prompt and seed, side by side, with their diff."""

from __future__ import annotations

import threading

import gradio as gr
import numpy as np
import plotly.graph_objects as go

from app import figures
from app.common import Sessions, check_prompt, on_gpu
from app.record import RunRecord
from app.runner import ModelHost, stream_run
from polestar.config import PRESETS, resolve
from polestar.errors import PolestarError


def diff(a: RunRecord, b: RunRecord) -> tuple[dict, go.Figure]:
    """Differing final tokens, commit-step shifts (b − a) per position, and the NFE of each."""
    ta, tb = a.canvases[-1], b.canvases[-1]
    sa, _ = a.commit_info()
    sb, _ = b.commit_info()
    shift = (sb - sa).astype(np.float32)
    differing = np.nonzero(ta != tb)[0]
    summary = {
        "A": a.label, "B": b.label, "nfe_A": a.metrics["nfe"], "nfe_B": b.metrics["nfe"],
        "tpf_A": a.metrics["tpf"], "tpf_B": b.metrics["tpf"], "differing_tokens": int(len(differing)),
        "differing_positions": differing.tolist()[:64], "mean_commit_step_shift": float(shift.mean()),
        "text_A": a.metrics["text"], "text_B": b.metrics["text"],
    }
    fig = go.Figure(go.Bar(x=np.arange(len(shift)), y=shift, marker_color=np.where(ta == tb, figures.COLOURS["quota"],
                                                                          figures.COLOURS["drift"]),
                           hovertemplate="pos %{x}<br>step shift %{y}<extra></extra>"))
    fig.update_xaxes(title="generated position (vermillion: different token, blue: same)")
    fig.update_yaxes(title="commit step B − A")
    return summary, figures.style(fig, "Commit-step shift", 300, "diff")


def build_compare_tab(demo: gr.Blocks, host: ModelHost, default_prompt: str) -> None:
    pairs: Sessions = Sessions()  # session hash -> its last (A, B) runs, for the playhead

    def frames(a: RunRecord, b: RunRecord, t: int | None):
        """Both canvases at step t (each run stops at its own last step) and the overlay with the playhead."""
        return (figures.token_canvas(a, None if t is None else min(t, a.n_steps)),
                figures.token_canvas(b, None if t is None else min(t, b.n_steps)),
                figures.compare_overlay(a, b, t))

    def compare(prompt: str, method_a: str, method_b: str, gen_length: float, seed: float,
                request: gr.Request = None):
        check_prompt(prompt)
        try:
            cfgs = [resolve(m, gen_length=int(gen_length), seed=int(seed), measure_staleness=True)
                    for m in (method_a, method_b)]
        except (PolestarError, TypeError, ValueError, OverflowError) as exc:
            raise gr.Error(f"Compare settings: {exc}") from None
        runs = []
        for label, cfg in zip(("A: " + method_a, "B: " + method_b), cfgs):
            *_, rec = stream_run(host, prompt, cfg, label, threading.Event(), probe=True, frame_s=1e9)
            runs.append(rec)
        pairs[request.session_hash if request is not None else "api"] = tuple(runs)
        summary, shift = diff(*runs)
        steps = max(r.n_steps for r in runs)
        return (*frames(*runs, None), shift, summary, gr.Slider(minimum=1, maximum=max(steps, 1), value=steps,
                                                                 step=1))

    def move(t: float, request: gr.Request):
        pair = pairs.get(request.session_hash)
        if pair is None:
            return [gr.skip()] * 3
        return frames(*pair, int(t))

    def forget(request: gr.Request):
        pairs.pop(request.session_hash, None)

    with gr.Tab("Compare"):
        gr.Markdown("Two configurations on the same prompt and seed, both with the analysis probe and staleness "
                    "measured (outside NFE/TPS). Switch one Polestar component off, or compare Fast-dLLM with "
                    "Polestar: which tokens differ, which commit earlier, how many forwards, and how stale each "
                    "cache gets and how much attention drifts, step by step on one playhead.")
        with gr.Row():
            prompt = gr.Textbox(value=default_prompt, label="Prompt", lines=2, scale=3)
            method_a = gr.Dropdown(list(PRESETS), value="fast-dllm", label="A")
            method_b = gr.Dropdown(list(PRESETS), value="polestar", label="B")
            gen_length = gr.Slider(32, 512, value=256, step=32, label="gen_length")
            seed = gr.Number(value=0, label="seed", precision=0)
        button = gr.Button("Compare", variant="primary")
        playhead = gr.Slider(0, 1, value=0, step=1, label="Playhead (step, both runs)")
        with gr.Row():
            canvas_a, canvas_b = gr.Plot(label="A"), gr.Plot(label="B")
        overlay = gr.Plot(label="Staleness and drift, A against B")
        gr.Markdown("Top: each run's KV staleness, the mean over layers of how far its cached K/V are from a full "
                    "recompute. Bottom: the mean attention drift of the positions still masked at that step. The "
                    "dotted line is the playhead; a run that needed fewer forwards ends earlier.")
        with gr.Row():
            shift = gr.Plot(label="Commit-step shift")
            summary = gr.JSON(label="Diff")
    button.click(on_gpu(compare), [prompt, method_a, method_b, gen_length, seed],
                 [canvas_a, canvas_b, overlay, shift, summary, playhead], api_name="compare", concurrency_limit=2)
    playhead.input(move, playhead, [canvas_a, canvas_b, overlay], api_name="compare_playhead",  # user moves only
                   show_progress="hidden")
    demo.unload(forget)
