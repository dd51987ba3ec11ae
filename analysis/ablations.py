"""Shared step of the ablation figures (Fig 6b–d, Fig 7): decode held-out examples with a grid of labelled configs
through `polestar.bench.run_bench` (methods interleaved per example, so machine noise hits all alike), summarise
per label (accuracy, TPF, NFE, TPS, Polestar's counters, speed-up over the panel's reference), and plot accuracy
against TPF per panel with each point labelled."""

from __future__ import annotations

from polestar.config import DecodeConfig


def run(args, model, panels: dict[str, dict[str, DecodeConfig]], reference: dict[str, str]):
    """panels: panel title -> {label -> config}; reference: panel -> label its speed-up is over. Returns
    (rows, summary, figure)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from polestar import bench

    configs = {f"{panel} | {label}": cfg for panel, grid in panels.items() for label, cfg in grid.items()}
    rows = bench.run_bench(model, [args.task], args.n, configs, seed=0, progress=False)
    table = bench.summarise(rows, methods=list(configs))
    by = {r["method"]: r for r in table}
    summary = {}
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=list(panels))
    for col, (panel, grid) in enumerate(panels.items(), start=1):
        base = by[f"{panel} | {reference[panel]}"]
        summary[panel] = {}
        for label in grid:
            r = by[f"{panel} | {label}"]
            summary[panel][label] = {"accuracy": r["accuracy"], "tpf": r["tpf"], "nfe": r["nfe"], "tps": r["tps"],
                                     "speedup": r["tps"] / base["tps"], "refresh_steps": r["refresh_steps"],
                                     "drift_commits": r["drift_commits"], "suffix_commits": r["suffix_commits"]}
        labels = list(grid)
        fig.add_trace(go.Scatter(x=[summary[panel][lab]["tpf"] for lab in labels],
                                 y=[100 * summary[panel][lab]["accuracy"] for lab in labels], mode="markers+text",
                                 text=labels, textposition="top center", marker={"size": 10, "color": "#0072B2"},
                                 showlegend=False, hovertemplate="%{text}<br>TPF %{x:.2f}<br>accuracy %{y:.1f} %"
                                                                 "<extra></extra>"), 1, col)
        fig.update_xaxes(title_text="TPF (content tokens per forward)", row=1, col=col)
    fig.update_yaxes(title_text="accuracy (%)", row=1, col=1)
    fig.update_layout(height=480, width=max(700, 450 * len(panels)))
    out_rows = [{k: v for k, v in r.items() if k != "config"} for r in rows]
    return out_rows, summary, fig
