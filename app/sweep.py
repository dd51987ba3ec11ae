"""The Sweep tab: one hyperparameter over a list of values, n task examples each, an accuracy-vs-speed Pareto
plot and a table. Finished settings are cached, so revisiting one is instant."""

from __future__ import annotations

import dataclasses

import gradio as gr
import plotly.graph_objects as go

from app import figures
from app.common import on_gpu
from app.runner import ModelHost
from polestar import tasks
from polestar.config import PRESETS, DecodeConfig, resolve
from polestar.errors import PolestarError

SWEEPABLE = [f.name for f in dataclasses.fields(DecodeConfig) if f.metadata["group"] not in ("analysis",)]


def _parse(field: str, text: str) -> list:
    kind = type(getattr(DecodeConfig(), field))
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values:
        raise gr.Error("Give at least one value, comma-separated (e.g. 0.7, 0.8, 0.9).")
    if kind is bool:
        return [v.lower() in ("1", "true", "on", "yes") for v in values]
    try:
        return [kind(float(v)) if kind in (int, float) else v for v in values]
    except ValueError:
        raise gr.Error(f"{field} takes numbers; got {text!r}") from None


def build_sweep_tab(host: ModelHost) -> None:
    cache: dict[tuple, dict] = {}

    def sweep(method: str, field: str, values_text: str, suite: str, n: float, gen_length: float,
              progress=gr.Progress()):
        values, n = _parse(field, values_text), int(n)
        try:
            configs = {v: resolve(method, gen_length=int(gen_length), **{field: v}) for v in values}
        except PolestarError as exc:
            raise gr.Error(str(exc)) from None
        import polestar

        model = host.submit(host.get).result()
        examples = tasks.make(suite, n, seed=0)
        rows = []
        for i, (value, cfg) in enumerate(configs.items()):
            key = (host.path, suite, n, dataclasses.astuple(cfg))
            if key not in cache:
                correct = tokens = nfe = 0
                wall = 0.0
                for ex in progress.tqdm(examples, desc=f"{field}={value} ({i + 1}/{len(configs)})"):
                    r = host.submit(lambda ex=ex, cfg=cfg: polestar.generate(model, ex.prompt, cfg)).result()
                    correct += tasks.score(suite, ex, r.text)
                    tokens, nfe, wall = tokens + round(r.tpf * r.nfe), nfe + r.nfe, wall + r.wall_s
                cache[key] = {"value": value, "accuracy": correct / n, "tpf": tokens / nfe, "tps": tokens / wall,
                              "nfe": nfe / n}
            rows.append(dict(cache[key], value=value))
        fig = go.Figure()
        for axis, name in (("tps", "TPS"), ("tpf", "TPF")):
            fig.add_trace(go.Scatter(x=[r[axis] for r in rows], y=[100 * r["accuracy"] for r in rows],
                                     mode="markers+text+lines", text=[str(r["value"]) for r in rows],
                                     textposition="top center", name=f"accuracy vs {name}",
                                     xaxis="x" if axis == "tps" else "x2"))
        fig.update_layout(xaxis=dict(title="TPS (tokens/s)", domain=[0, 0.47]),
                          xaxis2=dict(title="TPF (tokens/forward)", domain=[0.53, 1]),
                          yaxis=dict(title="accuracy (%)", range=[-2, 102]))
        figures.style(fig, f"{method}: sweeping {field}", 440, "sweep", legend=True)
        table = [[r["value"], round(100 * r["accuracy"], 1), round(r["tpf"], 2), round(r["tps"], 1),
                  round(r["nfe"], 1)] for r in rows]
        return fig, table

    with gr.Tab("Sweep"):
        gr.Markdown("Sweep one hyperparameter over task examples with known answers: where does accuracy start "
                    "to pay for speed? Settings already run are served from a cache.")
        with gr.Row():
            method = gr.Dropdown(list(PRESETS), value="polestar", label="Method")
            field = gr.Dropdown(SWEEPABLE, value="tau_s", label="Hyperparameter")
            values = gr.Textbox(value="0.7, 0.8, 0.9, 0.95", label="Values (comma-separated)")
            suite = gr.Dropdown(list(tasks.TASKS), value="lists", label="Task")
            n = gr.Slider(1, 100, value=8, step=1, label="Examples")
            gen_length = gr.Slider(32, 512, value=128, step=32, label="gen_length")
        button = gr.Button("Sweep", variant="primary")
        plot = gr.Plot(label="Pareto")
        table = gr.Dataframe(headers=["value", "accuracy %", "TPF", "TPS", "NFE"], label="Results")
        button.click(on_gpu(sweep), [method, field, values, suite, n, gen_length], [plot, table], api_name="sweep",
                     concurrency_limit=1)
