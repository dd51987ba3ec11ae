"""The Run tab: one prompt decoded step by step, streamed to the token canvas and the four analysis views.
Handlers are thin adapters from widget values to a `DecodeConfig` and a `polestar` call; all decoding logic lives
in the library, all colours in figures.py."""

from __future__ import annotations

import dataclasses
import math
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import gradio as gr

from app import figures, replays, runio
from app.common import Sessions, check_prompt, named, on_gpu
from app.record import RunRecord
from app.runner import ModelHost, stream_run
from polestar import tasks
from polestar.config import PRESETS, CacheKind, DecodeConfig, resolve, upgrade_names
from polestar.errors import ConfigError, PolestarError

SWITCHES = ("polestar_cache", "polestar_current_commit", "polestar_suffix_commit")
SLIDERS = ("gen_length", "block_length", "tau_s", "temperature", "seed", "polestar_window_prefix",
           "polestar_window_suffix", "polestar_centroids", "polestar_refresh_clusters",
           "polestar_refresh_clusters_last", "polestar_tau_upd", "polestar_history", "polestar_alpha",
           "polestar_tau_suffix", "polestar_hidden_format", "measure_staleness")
CONTROLS = SWITCHES + SLIDERS
# the Run tab's own defaults over every preset's: staleness is what the KV-staleness panel plots (its extra
# reference forward is excluded from NFE and TPS)
RUN_DEFAULTS = {"measure_staleness": True}
FIELDS = {f.name: f for f in dataclasses.fields(DecodeConfig)}
REPLAY_FRAMES, REPLAY_FRAME_S = 12, 0.05  # a cached run plays back in about two seconds (each frame draws 5 plots)
EXPLAIN = {
    "canvas": "Each cell is a generated position, one row per block. Grey cells are still masked. A cell's colour "
              "says why it was committed: **threshold** (confidence ≥ τ_s), **forced** (the most confident token, "
              "committed to guarantee progress), **drift** (Polestar: a sharp attention-drift event on a fairly "
              "confident token), **suffix** (Polestar: committed ahead of its block from refreshed logits), "
              "**quota** (LLaDA: a fixed number per step).",
    "drift": "Left: how much each generated position's attention distribution moved since the previous step (KL "
             "divergence, this layer; × marks its commit). Drift is high in and near the block being decoded "
             "and fades once a position's context is settled. Right (Polestar runs): the drift of each cluster "
             "of cached states, the signal Polestar ranks to choose which clusters to refresh.",
    "pca": "The last layer's value state of each chosen position, step by step, projected on one PCA basis. "
           "◆ marks the first strong drift, ★ the step the token was committed.",
    "timeline": "One marker per commit. The black line is tokens per forward so far (TPF).",
    "replay": "Runs recorded with the shipped model, played back from their traces in about two seconds: no "
              "decoding, so they work even while the model loads. Scrub them with the playhead afterwards.",
    "staleness": "How far the cached K/V are from a full recompute of the current canvas, per layer and step "
                 "(measured outside NFE/TPS). It drops at block entries and refreshes and grows while the block "
                 "is decoded against frozen entries; Compare overlays two methods on one playhead.",
}

# Browser side of the linked views (gr.Plot sends no click events to Python): a click on a canvas cell writes its
# position (the "pos N" of the cell's hover text) into the Selected position field, whose change redraws every
# view with that position marked. Hooked on each new canvas plot element as Gradio creates it.
SELECT_ON_CLICK = """() => {
  const hook = () => {
    const plot = document.querySelector('#token-canvas .js-plotly-plot');
    if (!plot || plot.__polestarSelect || typeof plot.on !== 'function') return;
    plot.__polestarSelect = true;
    plot.on('plotly_click', (event) => {
      const point = event.points && event.points[0];
      const found = point && String(point.customdata).match(/pos (\\d+)/);
      const field = document.querySelector('#selected-position textarea, #selected-position input');
      if (!found || !field) return;
      field.value = found[1];
      field.dispatchEvent(new Event('input', {bubbles: true}));
      field.dispatchEvent(new Event('change', {bubbles: true}));
    });
  };
  new MutationObserver(hook).observe(document.body, {childList: true, subtree: true});
  hook();
}"""


def _component(name: str, value: Any):
    f = FIELDS[name]
    meta = f.metadata
    label = name
    if meta["choices"] is not None:
        return gr.Dropdown([str(c) for c in meta["choices"]], value=str(value), label=label, info=meta["help"])
    if isinstance(f.default, bool):
        return gr.Checkbox(value=value, label=label, info=meta["help"])
    return gr.Slider(meta["min"], meta["max"], value=value, step=meta["step"], label=label, info=meta["help"])


def _config(method: str, values: dict[str, Any]) -> DecodeConfig:
    base = resolve(method)
    overrides = {}
    for name, value in values.items():
        default = getattr(base, name)
        try:
            if isinstance(default, bool):
                value = value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")
            elif isinstance(default, int):
                number = float(value)
                if number.is_integer():  # sliders send 3.0; 2.5 is not an integer and gets the config's message
                    value = int(number)
                else:
                    value = number
            elif isinstance(default, float):
                value = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{name} must be a number, got {value!r}") from None
        overrides[name] = value
    return base.replace(**overrides)


def link_query(prompt: str, method: str, values: dict[str, Any]) -> str:
    """The query string that restores these Run settings: the prompt, the method and every control that differs
    from the method's defaults in the Run tab."""
    from urllib.parse import urlencode

    cfg, base = _config(method, values), resolve(method, **RUN_DEFAULTS)
    changed = {n: str(getattr(cfg, n)).lower() if isinstance(getattr(cfg, n), bool) else str(getattr(cfg, n))
               for n in CONTROLS if getattr(cfg, n) != getattr(base, n)}
    return urlencode({"prompt": prompt, "method": method, **changed})


def restore_query(params: dict[str, str]) -> tuple[str | None, str, DecodeConfig]:
    """(prompt, method, config) from a shared link's query parameters; unknown keys are ignored, bad values raise
    PolestarError naming the field."""
    method = params.get("method", "polestar")
    base = resolve(method)
    params = upgrade_names(dict(params))  # links made before the method prefixes
    values: dict[str, Any] = {}
    for name in CONTROLS:
        if name in params:
            raw = params[name]
            default = getattr(base, name)
            values[name] = raw.lower() in ("1", "true", "yes", "on") if isinstance(default, bool) else raw
    return params.get("prompt"), method, _config(method, {**RUN_DEFAULTS, **values})


def check_view(layer: Any, positions: Any, selected: Any = None) -> tuple[int, str, int | None]:
    """The layer, positions and selected-position fields of the views, or a PolestarError naming the field.
    An empty selection is None (nothing highlighted)."""
    try:
        number = float(layer)
    except (TypeError, ValueError):
        raise ConfigError(f"layer must be a number, got {layer!r}") from None
    if not math.isfinite(number):
        raise ConfigError(f"layer must be a number, got {layer!r}")
    if not isinstance(positions, str):
        raise ConfigError(f"positions must be text such as '0 1 2 3', got {positions!r}")
    if selected is None or (isinstance(selected, str) and not selected.strip()):
        return max(0, int(number)), positions, None
    try:
        chosen = float(selected)
    except (TypeError, ValueError):
        raise ConfigError(f"selected position must be a whole number (or empty), got {selected!r}") from None
    if not math.isfinite(chosen) or chosen != int(chosen) or chosen < 0:
        raise ConfigError(f"selected position must be a whole number ≥ 0 (or empty), got {selected!r}")
    return max(0, int(number)), positions, int(chosen)


def _panels(rec: RunRecord | None, t: int | None, layer: int, positions: str, selected: int | None = None,
            live: bool = False):
    """The five views at step t; `selected` (a generated position) is marked in each of them. `live` (a frame of
    a run still decoding): the staleness and PCA views, which summarise the whole run, wait for its end (drawing
    them every frame took a third of the frame time, and frames compete with the decode for the CPU)."""
    if rec is None or not rec.events:
        empty = figures.go.Figure()
        return empty, empty, empty, empty, empty
    if selected is not None and selected >= rec.gen_length:
        raise gr.Error(f"selected position {selected} is outside this run's canvas: choose 0–{rec.gen_length - 1} "
                       "or click a canvas cell")
    pos = [int(p) for p in positions.replace(",", " ").split() if p.strip().lstrip("-").isdigit()]
    layer = min(int(layer), len(rec.drift[0]) - 1) if rec.drift else 0
    if live:
        return (figures.token_canvas(rec, t, selected), figures.drift_heatmap(rec, layer, t, selected),
                figures.commit_timeline(rec, t, selected), *figures.at_the_end("staleness", "pca"))
    return (figures.token_canvas(rec, t, selected), figures.drift_heatmap(rec, layer, t, selected),
            figures.commit_timeline(rec, t, selected), figures.staleness_curves(rec, t, selected),
            figures.pca_trajectories(rec, pos or [0, 1, 2, 3], t, selected))


def build_run_tab(demo: gr.Blocks, host: ModelHost, examples: list, n_layers: int) -> None:
    """The Run tab inside `demo`'s tabs; `examples` are the task examples offered (the first is the default
    prompt), `n_layers` the served checkpoint's layer count (the layer slider's range)."""
    records: Sessions = Sessions()  # session hash -> its last run
    stops: Sessions = Sessions()  # session hash -> its stop flag
    by_prompt = {ex.prompt: ex for ex in examples}

    def view(layer: Any, positions: Any, selected: Any) -> tuple[int, str, int | None]:
        try:
            return check_view(layer, positions, selected)
        except PolestarError as exc:
            raise gr.Error(str(exc)) from None

    def run(prompt: str, method: str, probe: bool, layer: float, positions: str, selected: str,
            *values: Any, request: gr.Request = None):
        session = request.session_hash if request is not None else "api"
        check_prompt(prompt)
        try:
            cfg = _config(method, dict(zip(CONTROLS, values)))
            shown = check_view(layer, positions, selected)
        except PolestarError as exc:
            raise gr.Error(str(exc)) from None
        stop = stops[session] = stops.get(session) or threading.Event()
        stop.clear()
        try:
            for rec in stream_run(host, prompt, cfg, method, stop, probe=probe):
                records[session] = rec
                metrics = dict(rec.metrics) if rec.done else {"steps": rec.n_steps}
                if rec.done and prompt in by_prompt:
                    ex = by_prompt[prompt]
                    metrics["correct"] = tasks.score(ex.task, ex, rec.metrics["text"])
                status = f"step {rec.n_steps}"
                if rec.done:
                    status = f"stopped at step {rec.n_steps}" if rec.metrics.get("stopped") else "done"
                slider = gr.Slider(minimum=0, maximum=max(rec.n_steps, 1), value=rec.n_steps, step=1)
                yield (*_panels(rec, None, *shown, live=not rec.done), metrics, status, slider)
        except PolestarError as exc:
            raise gr.Error(str(exc)) from None
        finally:  # Stop now has nothing to stop
            if stops.get(session) is stop:
                stops.pop(session)

    def move(t: float, layer: float, positions: str, selected: str, request: gr.Request):
        shown = view(layer, positions, selected)
        rec = records.get(request.session_hash)
        if rec is None or not rec.done:  # while a run streams, its own frames drive the panels
            return [gr.skip()] * 5
        return _panels(rec, int(t), *shown)

    def step(t: float, layer: float, positions: str, selected: str, request: gr.Request):
        shown = view(layer, positions, selected)
        rec = records.get(request.session_hash)
        if rec is None:
            raise gr.Error("Run a prompt first; Step then walks through its steps one at a time.")
        t = min(int(t) + 1, rec.n_steps)
        return (*_panels(rec, t, *shown), gr.Slider(value=t))

    def stop_run(request: gr.Request) -> None:
        # no output: the run's own last frame says "stopped at step N" within a step of this, and a status
        # written here could reach the browser after that frame and stay there
        flag = stops.get(request.session_hash)
        if flag is None:
            gr.Info("Nothing is running: Stop ends a run of this page that is still decoding.")
            return
        flag.set()

    def forget(request: gr.Request):
        records.pop(request.session_hash, None)
        flag = stops.pop(request.session_hash, None)
        if flag is not None:  # the page is gone: its run stops instead of keeping the model busy
            flag.set()

    def reset(request: gr.Request):
        records.pop(request.session_hash, None)
        return (*_panels(None, None, 0, ""), {}, "ready", gr.Slider(minimum=0, maximum=1, value=0))

    def export(request: gr.Request, kind: str):
        rec = records.get(request.session_hash)
        if rec is None or not rec.done:
            raise gr.Error("Nothing to export yet: run a prompt to the end first.")
        path = Path(tempfile.mkdtemp()) / f"polestar-run.{kind}"
        if kind == "parquet":
            runio.save_parquet(rec, path)
        else:
            path.write_text(runio.html_report(rec))
        return str(path)

    def export_parquet(request: gr.Request):
        return export(request, "parquet")

    def export_report(request: gr.Request):
        return export(request, "html")

    def load(file, layer: float, positions: str, selected: str, request: gr.Request):
        shown = view(layer, positions, selected)
        try:
            rec = runio.load_parquet(file)
        except runio.RunFileError as exc:
            raise gr.Error(f"Cannot load this file: {exc}") from None
        records[request.session_hash] = rec
        slider = gr.Slider(minimum=0, maximum=max(rec.n_steps, 1), value=rec.n_steps, step=1)
        return (*_panels(rec, None, *shown), rec.metrics, f"loaded {rec.label}", slider)

    cached = replays.available()
    served = replays.model_fingerprint(host.path) if cached else ""

    def replay_label(r: replays.Replay) -> str:
        return r.name if r.model_sha256 == served else f"{r.name} (recorded with another model)"

    def replay(name: str, layer: float, positions: str, selected: str, request: gr.Request):
        shown = view(layer, positions, selected)
        chosen = next((r for r in cached if replay_label(r) == name), None)
        if chosen is None:
            raise gr.Error("Pick a cached run from the list first.")
        try:
            rec = runio.load_parquet(chosen.file)
        except runio.RunFileError as exc:
            raise gr.Error(f"The cached run is damaged ({exc}); re-record with `python -m app.replays`.") from None
        records[request.session_hash] = rec
        n = rec.n_steps
        # at most REPLAY_FRAMES frames, evenly spaced, the last one the finished run
        count = min(n, REPLAY_FRAMES)
        frames = sorted({1 + round(i * (n - 1) / max(1, count - 1)) for i in range(count)})
        for t in frames:  # played back from the trace: no model, no decoding
            slider = gr.Slider(minimum=0, maximum=max(n, 1), value=t, step=1)
            metrics = rec.metrics if t == n else {"steps": t}
            status = f"replay of {replay_label(chosen)}" + ("" if t == n else f": step {t}/{n}")
            yield (*_panels(rec, t, *shown), metrics, status, slider, chosen.prompt)
            if t < n:
                time.sleep(REPLAY_FRAME_S)

    def share_link(prompt: str, method: str, *values: Any, request: gr.Request = None):
        try:
            query = link_query(prompt, method, dict(zip(CONTROLS, values)))
        except PolestarError as exc:
            raise gr.Error(f"These settings cannot be shared: {exc}") from None
        page = (request.headers.get("referer", "") if request is not None else "").split("?")[0]
        return f"{page}?{query}"

    def restore(request: gr.Request):
        params = dict(request.query_params) if request is not None else {}
        if not params:
            return [gr.skip()] * (2 + len(CONTROLS))
        try:
            text, method, cfg = restore_query(params)
        except PolestarError as exc:
            gr.Warning(f"The link's settings were not applied: {exc}")
            return [gr.skip()] * (2 + len(CONTROLS))
        shown = [str(getattr(cfg, n)) if FIELDS[n].metadata["choices"] else getattr(cfg, n) for n in CONTROLS]
        return [text if text else gr.skip(), method, *shown]

    def preset_values(method: str):
        cfg = resolve(method, **RUN_DEFAULTS)
        polestar_method = cfg.cache == CacheKind.POLESTAR  # its component switches mean nothing elsewhere
        updates = [gr.update(value=str(getattr(cfg, n)) if FIELDS[n].metadata["choices"] else getattr(cfg, n),
                             interactive=polestar_method or n not in SWITCHES)
                   for n in CONTROLS]
        return [*updates, f"controls set to {method}'s defaults"]

    with gr.Tab("Run"):
        with gr.Row():
            with gr.Column(scale=1, min_width=320):
                prompt = gr.Textbox(label="Prompt", lines=3, value=examples[0].prompt)
                method = gr.Dropdown(list(PRESETS), value="polestar", label="Method")
                with gr.Row():
                    run_btn = gr.Button("Run", variant="primary")
                    step_btn = gr.Button("Step")
                    stop_btn = gr.Button("Stop")
                    reset_btn = gr.Button("Reset")
                status = gr.Markdown("ready", label="Status")
                gr.Examples([[ex.prompt] for ex in examples], inputs=[prompt],
                            label="Task examples (known answers)")
                with gr.Accordion("Instant replays (cached example runs)", open=False):
                    replay_pick = gr.Dropdown([replay_label(r) for r in cached],
                                              value=replay_label(cached[0]) if cached else None,
                                              label="Cached run", interactive=bool(cached))
                    replay_btn = gr.Button("Replay", interactive=bool(cached))
                    gr.Markdown(EXPLAIN["replay"])
                probe = gr.Checkbox(value=True,
                                    label="analysis probe (drift heatmap, PCA; not counted in NFE/TPS)")
                metrics = gr.JSON(label="Metrics")
                default = resolve("polestar", **RUN_DEFAULTS)
                with gr.Accordion("Polestar components", open=True):
                    switches = [_component(n, getattr(default, n)) for n in SWITCHES]
                with gr.Accordion("Hyperparameters", open=False):
                    sliders = [_component(n, getattr(default, n)) for n in SLIDERS]
                with gr.Accordion("Share these settings", open=False):
                    share_btn = gr.Button("Make a link")
                    share_box = gr.Textbox(label="Link (prompt, method and every changed setting)",
                                           buttons=["copy"])
                with gr.Accordion("Export / import", open=False):
                    with gr.Row():
                        export_trace = gr.Button("Download trace (parquet)")
                        export_html = gr.Button("Download report (HTML)")
                    download = gr.File(label="Download", interactive=False)
                    upload = gr.File(label="Load a trace (.parquet)", file_types=[".parquet"])
            with gr.Column(scale=2):
                playhead = gr.Slider(0, 1, value=0, step=1, label="Playhead (step)")
                canvas_plot = gr.Plot(label="Token canvas", elem_id="token-canvas")
                with gr.Accordion("What the canvas shows", open=False):
                    gr.Markdown(EXPLAIN["canvas"])
                with gr.Row(equal_height=True):  # the four views side by side, two per row
                    with gr.Column():
                        layer = gr.Slider(0, max(n_layers - 1, 1), value=n_layers - 1, step=1,
                                          label="Layer (drift heatmap)")
                        drift_plot = gr.Plot(label="Attention drift")
                        gr.Markdown(EXPLAIN["drift"])
                    with gr.Column():
                        with gr.Row():
                            positions = gr.Textbox(value="0 1 2 3", label="Generated positions (PCA)")
                            selected = gr.Textbox(value="", elem_id="selected-position", max_lines=1,
                                                  label="Selected position (click a canvas cell)")
                        pca_plot = gr.Plot(label="PCA trajectories")
                        gr.Markdown(EXPLAIN["pca"])
                with gr.Row(equal_height=True):
                    with gr.Column():
                        timeline_plot = gr.Plot(label="Commit timeline")
                        gr.Markdown(EXPLAIN["timeline"])
                    with gr.Column():
                        staleness_plot = gr.Plot(label="KV staleness")
                        gr.Markdown(EXPLAIN["staleness"])
    panels = [canvas_plot, drift_plot, timeline_plot, staleness_plot, pca_plot]
    controls = [*switches, *sliders]
    run_btn.click(on_gpu(named(run, ["prompt", "method", "probe", "layer", "positions", "selected", *CONTROLS])),
                  [prompt, method, probe, layer, positions, selected, *controls],
                  [*panels, metrics, status, playhead], api_name="run", show_progress="hidden",
                  concurrency_limit=4, preprocess=False)  # raw values: _config names a bad field itself
    # no `cancels`: the flag stops the decode within one step and the run then yields its final frame
    stop_btn.click(stop_run, None, None, api_name="stop")
    reset_btn.click(reset, None, [*panels, metrics, status, playhead], api_name="reset")
    view_inputs = [playhead, layer, positions, selected]
    step_btn.click(step, view_inputs, [*panels, playhead], api_name="step")
    # `.input`: the user's moves only. Every handler that sets the playhead draws its panels itself, and a `.change`
    # queued by a streamed frame could land after the run's last frame and redraw an earlier step over it
    playhead.input(move, view_inputs, panels, api_name="playhead", show_progress="hidden")
    layer.change(move, view_inputs, panels, api_name=False)  # drags and typed numbers
    positions.submit(move, view_inputs, panels, api_name=False)
    # a typed number, or a click on a canvas cell (SELECT_ON_CLICK writes the cell's position into the field)
    selected.change(move, view_inputs, panels, api_name="select", show_progress="hidden")
    # `.input`: only a user's choice resets the controls; a deep link sets the method and its own values together
    method.input(preset_values, method, [*controls, status], api_name=False)
    export_trace.click(export_parquet, None, download, api_name=False)
    export_html.click(export_report, None, download, api_name=False)
    replay_btn.click(replay, [replay_pick, layer, positions, selected], [*panels, metrics, status, playhead, prompt],
                     api_name="replay", show_progress="hidden")
    upload.upload(load, [upload, layer, positions, selected], [*panels, metrics, status, playhead], api_name=False)
    demo.unload(forget)
    share_btn.click(named(share_link, ["prompt", "method", *CONTROLS]), [prompt, method, *controls], share_box,
                    api_name="share_link")
    demo.load(restore, None, [prompt, method, *controls], api_name=False)
    demo.load(None, None, None, js=SELECT_ON_CLICK)
