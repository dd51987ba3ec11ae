"""The Compare tab: two configurations on the same prompt and seed, side by side, with their diff."""

from __future__ import annotations

import threading

import gradio as gr
import numpy as np
import plotly.graph_objects as go

from app import figures
from app.common import check_prompt, on_gpu
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


def build_compare_tab(host: ModelHost, default_prompt: str) -> None:
    def compare(prompt: str, method_a: str, method_b: str, gen_length: float, seed: float):
        check_prompt(prompt)
        try:
            cfgs = [resolve(m, gen_length=int(gen_length), seed=int(seed)) for m in (method_a, method_b)]
        except PolestarError as exc:
            raise gr.Error(str(exc)) from None
        runs = []
        for label, cfg in zip(("A: " + method_a, "B: " + method_b), cfgs):
            *_, rec = stream_run(host, prompt, cfg, label, threading.Event(), probe=False, frame_s=1e9)
            runs.append(rec)
        summary, shift = diff(*runs)
        return figures.token_canvas(runs[0]), figures.token_canvas(runs[1]), shift, summary

    with gr.Tab("Compare"):
        gr.Markdown("Two configurations on the same prompt and seed. Switch one Polestar component off, or "
                    "compare Fast-dLLM with Polestar: which tokens differ, which commit earlier, how many forwards.")
        with gr.Row():
            prompt = gr.Textbox(value=default_prompt, label="Prompt", lines=2, scale=3)
            method_a = gr.Dropdown(list(PRESETS), value="fast-dllm", label="A")
            method_b = gr.Dropdown(list(PRESETS), value="polestar", label="B")
            gen_length = gr.Slider(32, 512, value=128, step=32, label="gen_length")
            seed = gr.Number(value=0, label="seed", precision=0)
        button = gr.Button("Compare", variant="primary")
        with gr.Row():
            canvas_a, canvas_b = gr.Plot(label="A"), gr.Plot(label="B")
        shift = gr.Plot(label="Commit-step shift")
        summary = gr.JSON(label="Diff")
        button.click(on_gpu(compare), [prompt, method_a, method_b, gen_length, seed],
                     [canvas_a, canvas_b, shift, summary], api_name="compare", concurrency_limit=2)
