"""`create_app()`: the Gradio Blocks of Polestar Studio, its Run, Compare and Sweep tabs (one module each)."""

from __future__ import annotations

import gradio as gr

from app.common import layer_count, zero_gpu
from app.compare import build_compare_tab
from app.examples import examples as task_examples
from app.run_tab import build_run_tab
from app.runner import ModelHost
from app.sweep import build_sweep_tab


def create_app(model_path: str | None = None, device: str | None = None) -> gr.Blocks:
    """Build the app. Nothing is loaded until the first run; the model is shared by all sessions."""
    import polestar

    host = ModelHost(model_path or polestar.DEFAULT_MODEL, device, inline=zero_gpu())
    # load the shared model in the background while the page is being served, so the first Run is quick
    host.preload()
    examples = task_examples()
    with gr.Blocks(title="Polestar Studio") as demo:
        gr.Markdown("# Polestar Studio\nWatch a masked diffusion LLM decode, step by step: which tokens commit and "
                    "why, how attention drifts, how stale the cache gets. Pick a method, tweak it, press **Run**.")
        with gr.Tabs():
            build_run_tab(demo, host, examples, layer_count(host.path))
            build_compare_tab(demo, host, examples[0].prompt)
            build_sweep_tab(host)
    return demo
