"""Shared step of the ablation figures (Fig 6b–d, Fig 7): decode held-out examples with a grid of labelled configs
through `polestar.bench.run_bench` (methods interleaved per example, so machine noise hits all alike), summarise
per label (accuracy, TPF, NFE, TPS, Polestar's counters, speed-up over the panel's reference, and each example's
right/wrong in example order, so that `analysis.findings` can compare accuracies pairwise), and plot the TPS ratio
against TPF per panel, each point labelled with its setting and accuracy."""

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
    correct = {m: [int(r["correct"]) for r in sorted((r for r in rows if r["method"] == m),
                                                      key=lambda r: (r["suite"], r["example"]))] for m in configs}
    summary = {}
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=list(panels))
    for col, (panel, grid) in enumerate(panels.items(), start=1):
        base = by[f"{panel} | {reference[panel]}"]
        summary[panel] = {}
        for label in grid:
            r = by[f"{panel} | {label}"]
            summary[panel][label] = {"accuracy": r["accuracy"], "tpf": r["tpf"], "nfe": r["nfe"], "tps": r["tps"],
                                     "speedup": r["tps"] / base["tps"], "refresh_steps": r["refresh_steps"],
                                     "drift_commits": r["drift_commits"], "suffix_commits": r["suffix_commits"],
                                     "correct": correct[f"{panel} | {label}"]}
        labels = list(grid)
        fig.add_trace(go.Scatter(x=[summary[panel][lab]["tpf"] for lab in labels],
                                 y=[summary[panel][lab]["speedup"] for lab in labels], mode="markers+text",
                                 text=[f"{lab} ({100 * summary[panel][lab]['accuracy']:.0f} %)" for lab in labels],
                                 textposition=_label_positions([summary[panel][lab]["tpf"] for lab in labels],
                                                               [summary[panel][lab]["speedup"] for lab in labels]),
                                 marker={"size": 10, "color": "#0072B2"}, showlegend=False, cliponaxis=False,
                                 hovertemplate="%{text}<br>TPF %{x:.2f}<br>TPS %{y:.2f}× the reference"
                                               "<extra></extra>"), 1, col)
        xs = [summary[panel][lab]["tpf"] for lab in labels]
        ys = [summary[panel][lab]["speedup"] for lab in labels]
        fig.update_xaxes(title_text="TPF (content tokens per forward)", range=_padded(xs, 0.25), row=1, col=col)
        fig.update_yaxes(range=_padded(ys, 0.2), row=1, col=col)
    fig.update_yaxes(title_text="TPS over the panel's reference (×)", row=1, col=1)
    fig.add_annotation(text="labels: setting (accuracy)", xref="paper", yref="paper", x=0, y=-0.22,
                       showarrow=False, xanchor="left")
    fig.update_layout(height=500, width=max(700, 450 * len(panels)), margin={"b": 110})
    out_rows = [{k: v for k, v in r.items() if k != "config"} for r in rows]
    return out_rows, summary, fig


def _label_positions(xs: list[float], ys: list[float]) -> list[str]:
    """A text position per point: alternating above and below, except that a point near an earlier one (labels
    are wide: a quarter of the x range, 15 % of the y range) takes the first side that none of its near neighbours
    took, the vertical ones first (a label beside a point runs into a neighbour's label above or below it), so
    close settings keep readable labels."""
    span_x, span_y = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
    out: list[str] = []
    for i, (x, y) in enumerate(zip(xs, ys)):
        near = {out[j] for j in range(i) if abs(xs[j] - x) < 0.25 * span_x and abs(ys[j] - y) < 0.15 * span_y}
        if not near:
            out.append(("top center", "bottom center")[i % 2])
            continue
        sides = ("top center", "bottom center", "middle left", "middle right")
        out.append(next((side for side in sides if side not in near), sides[0]))
    return out


def _padded(values: list[float], share: float) -> list[float]:
    """An axis range with room around the points for their text labels."""
    lo, hi = min(values), max(values)
    room = share * (hi - lo or abs(hi) or 1.0)
    return [lo - room, hi + room]
