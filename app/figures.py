"""Pure functions RunRecord -> Plotly figures. Colours live here, nowhere in the library.

Every figure sets `uirevision` so zoom and pan survive streamed updates, fixes its height and margins, and
sends numpy float32 / int arrays (plotly encodes them as compact typed arrays).

The views a run streams are written as plain trace and layout dicts and wrapped unvalidated (`_figure`):
building them through plotly's validated setters (`update_layout`, `update_xaxes`, magic-underscore paths) cost
~0.1 s a figure on a 2-core CPU, the most of a frame, and frames share the CPU with the decode.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from app.record import REASONS, RunRecord

# Okabe–Ito: eight colours told apart with any of the common colour-vision deficiencies (Okabe & Ito, 2008)
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
COLOURS = {
    "masked": "#d9d9d9", "quota": "#0072B2", "threshold": "#009E73", "forced": "#E69F00",
    "factor": "#CC79A7", "drift": "#D55E00", "suffix": "#56B4E9",
}


def layer_colours(n: int) -> list[str]:
    """One colour per layer from a perceptually ordered, colour-blind-safe ramp (Viridis): layer order reads
    as lightness, with no red–green pair to tell apart."""
    from plotly.colors import sample_colorscale

    return sample_colorscale("Viridis", [i / max(1, n - 1) * 0.9 for i in range(n)])


GRID = "#ebebeb"
AXIS_TITLE_SPACE = 70  # px under a plot's area taken by its tick labels and x-axis title
LEGEND_SPACE = 145  # bottom margin of a figure with a legend: the axis title plus three legend rows


AXIS = dict(gridcolor=GRID, zerolinecolor=GRID, linecolor=GRID)


def _layout(title: str, height: int, key: str, legend: bool = False, **parts) -> dict:
    """Shared look as a layout dict; `parts` are further layout entries, axes (`xaxis`, `yaxis2`…) getting the
    shared axis colours under their own settings. A light style set by hand on an empty template: a named
    template such as plotly_white is deep-copied into every figure (about 10 ms and 6 KB per figure per frame)."""
    bottom = LEGEND_SPACE if legend else 40
    layout = dict(title=dict(text=title), height=height, margin=dict(l=50, r=20, t=40, b=bottom),
                  uirevision=key, showlegend=legend, template={}, plot_bgcolor="white", paper_bgcolor="white",
                  font=dict(family="Inter, Helvetica, Arial, sans-serif", size=12, color="#2a3f5f"),
                  # below the tick labels and the x-axis title: y is a fraction of the plot area's height
                  legend=dict(orientation="h", yanchor="top", y=-AXIS_TITLE_SPACE / (height - 40 - bottom)),
                  xaxis=dict(AXIS), yaxis=dict(AXIS))
    for name, part in parts.items():
        layout[name] = {**AXIS, **part} if name.startswith(("xaxis", "yaxis")) else part
    return layout


def _figure(data: list[dict], layout: dict) -> go.Figure:
    """A figure from plain dicts, unvalidated (each trace names its `type`; titles are `dict(text=…)`): plotly's
    `_validate=False`, which the figure tests check still sends the dicts as they are."""
    return go.Figure(data=data, layout=layout, _validate=False)


def _title(text: str) -> dict:
    return dict(text=text)


def _scale(name: str) -> list:
    """A named plotly.py colour scale as its stops (plotly.js knows Viridis but not Magma; stops work in both)."""
    from plotly.colors import get_colorscale

    return get_colorscale(name)


def style(fig: go.Figure, title: str, height: int, key: str, legend: bool = False) -> go.Figure:
    """The shared look on a figure built through plotly's API (the sweep and compare views)."""
    # a validated figure already holds plotly's default template: name the empty one to replace it (a {} merges)
    fig.update_layout(_layout(title, height, key, legend) | dict(template="none"))
    fig.update_xaxes(AXIS)
    fig.update_yaxes(AXIS)
    return fig


TITLES = {"staleness": "KV staleness against a full recompute", "pca": "Value-state trajectories (PCA, fixed basis)"}
SELECTED = "#000000"  # the chosen position's outline and guide lines in every view


def _chosen(rec: RunRecord, selected: int | None) -> int | None:
    """`selected` if it names a generated position of `rec`, else None (the views then mark nothing)."""
    return selected if selected is not None and 0 <= selected < rec.gen_length else None


def token_canvas(rec: RunRecord, t: int | None = None, selected: int | None = None) -> go.Figure:
    """Generated positions as a block × offset grid coloured by state and commit reason; the selected position
    outlined."""
    b = rec.config.block_length
    t = rec.n_steps if t is None else t
    reasons = rec.reason_grid(t)
    canvas = rec.canvases[t - 1] if t > 0 and rec.canvases else np.full(rec.gen_length, rec.mask_id)
    steps, conf = rec.commit_info()
    rows = rec.gen_length // b
    z = reasons.reshape(rows, b).astype(np.float32)
    text = np.array([_cell_label(_display(rec, int(tok))) if r else "·"
                     for tok, r in zip(canvas, reasons)]).reshape(rows, b)
    # the probe's drift at this step, last layer (KL of the position's attention against the previous step)
    drift = rec.drift[t - 1][-1] if rec.drift and 0 < t <= len(rec.drift) else None
    hover = np.array([
        f"pos {i}<br>{REASONS[r]}<br>token {_display(rec, int(tok))!r}"
        + (f"<br>conf {conf[i]:.3f}<br>step {steps[i]}" if r else "")
        + (f"<br>drift {drift[i]:.3g} (last layer, this step)" if drift is not None and i < len(drift) else "")
        for i, (tok, r) in enumerate(zip(canvas, reasons))
    ]).reshape(rows, b)
    n = len(REASONS)
    scale = [[v, COLOURS[name]] for i, name in enumerate(REASONS) for v in (i / n, (i + 1) / n)]
    heatmap = dict(type="heatmap", z=z, zmin=0, zmax=n, colorscale=scale, text=text.tolist(), textfont=dict(size=9),
                   customdata=hover.tolist(), hovertemplate="%{customdata}<extra></extra>", xgap=1, ygap=3,
                   colorbar=dict(tickvals=[i + 0.5 for i in range(n)], ticktext=list(REASONS), len=0.9))
    if z.size <= 1024:  # cell labels: unreadable and slow to draw on a larger canvas
        heatmap["texttemplate"] = "%{text}"
    shapes = []
    if (p := _chosen(rec, selected)) is not None:
        row, col = divmod(p, b)
        shapes.append(dict(type="rect", x0=col - 0.5, x1=col + 0.5, y0=row - 0.5, y1=row + 0.5,
                           line=dict(color=SELECTED, width=3)))
    # at least 280 px: the colour bar names seven reasons, which a short canvas (few blocks) would squeeze together
    return _figure([heatmap], _layout(
        f"Token canvas — step {t}/{rec.n_steps}", max(280, 120 + 26 * rows), "canvas", shapes=shapes,
        yaxis=dict(autorange="reversed", title=_title("block"), tickvals=list(range(rows))),
        xaxis=dict(title=_title("offset in block"))))


def drift_heatmap(rec: RunRecord, layer: int, t: int | None = None, selected: int | None = None) -> go.Figure:
    """Attention drift KL(A(t) ‖ A(t−1)) per generated position × step at one layer (paper Fig 4); commits
    marked, the selected position's row outlined. Beside it, Polestar's per-cluster drift at that layer when the
    run has it."""
    t = rec.n_steps if t is None else t
    clusters = _cluster_drift(rec, layer, t)
    data, shapes = [], []
    parts: dict = dict(yaxis=dict(title=_title("generated position"), autorange="reversed"),
                       xaxis=dict(title=_title("step")))
    if clusters is not None:  # two panels side by side, laid out by hand (make_subplots costs ~25 ms a frame)
        parts["xaxis"]["domain"] = DRIFT_DOMAINS[0]
        # no y title on the cluster panel: its panel title names the clusters, and a title would crowd the
        # colour bar beside it
        parts.update(xaxis2=dict(domain=DRIFT_DOMAINS[1], anchor="y2", title=_title("step")),
                     yaxis2=dict(anchor="x2"),
                     annotations=[_panel_title(text, sum(domain) / 2)
                                  for text, domain in zip(("token drift", "cluster drift"), DRIFT_DOMAINS)])
    if rec.drift and t > 0:
        z = np.stack([d[layer] for d in rec.drift[:t]], axis=1).astype(np.float32)  # [G, steps]
        vmax = float(np.nanpercentile(np.stack([d[layer] for d in rec.drift]), 99)) or 1e-6
        data.append(dict(type="heatmap", z=z, x=np.arange(1, t + 1), zmin=0, zmax=vmax, colorscale=_scale("Viridis"),
                         colorbar=dict(title=_title("KL"), thickness=10,
                                       x=DRIFT_DOMAINS[0][1] + 0.02 if clusters is not None else 1.0),
                         hovertemplate="step %{x}<br>pos %{y}<br>KL %{z:.3g}<extra></extra>"))
        steps, _ = rec.commit_info()
        done = (steps > 0) & (steps <= t)
        data.append(dict(type="scatter", x=steps[done], y=np.nonzero(done)[0], mode="markers", name="commit",
                         marker=dict(symbol="x", size=5, color="white", line=dict(width=1))))
        if (p := _chosen(rec, selected)) is not None:
            # white, dashed: black would vanish on Viridis' dark end
            shapes.append(dict(type="rect", x0=0.5, x1=t + 0.5, y0=p - 0.5, y1=p + 0.5, xref="x", yref="y",
                               line=dict(color="white", width=2, dash="dash")))
    if clusters is not None:
        data.append(dict(type="heatmap", z=clusters, x=np.arange(1, clusters.shape[1] + 1), colorscale=_scale("Magma"),
                         colorbar=dict(title=_title("KL"), x=1.02, thickness=10), xaxis="x2", yaxis="y2",
                         hovertemplate="step %{x}<br>cluster %{y}<br>KL %{z:.3g}<extra></extra>"))
    return _figure(data, _layout(f"Attention drift — layer {layer}", 420, "drift", shapes=shapes, **parts))


DRIFT_DOMAINS = ((0.0, 0.46), (0.74, 1.0))  # token drift | cluster drift; between them its colour bar, then
# the cluster axis (at the app's ~400 px panel width the bar and the cluster ticks overlapped at 0.52 | 0.68)


def _panel_title(text: str, x: float) -> dict:
    """A panel's title above its plot area, centred at paper coordinate x (as make_subplots places them)."""
    return dict(text=text, x=x, y=1.0, xref="paper", yref="paper", xanchor="center", yanchor="bottom",
                showarrow=False, font=dict(size=16))


def _cluster_drift(rec: RunRecord, layer: int, t: int) -> np.ndarray | None:
    cols = [e.extra.get("cluster_drift") for e in rec.events[:t]]
    if not any(cols):
        return None
    width = max(len(c[layer]) for c in cols if c and len(c) > layer)
    z = np.full((width, len(cols)), np.nan, dtype=np.float32)
    for j, c in enumerate(cols):
        if c and len(c) > layer:
            z[: len(c[layer]), j] = c[layer]
    return z


def commit_timeline(rec: RunRecord, t: int | None = None, selected: int | None = None) -> go.Figure:
    """One marker per commit (step × position) coloured by reason, each reason's count up to step t in its legend
    entry; cumulative TPF over steps; the selected position's row as a dotted line, its commit ringed."""
    t = rec.n_steps if t is None else t
    data, shapes = [], []
    by_reason: dict[str, tuple[list, list]] = {}
    content, tpf = 0, []
    for i, event in enumerate(rec.events[:t]):
        for c in event.commits:
            xs, ys = by_reason.setdefault(c.reason, ([], []))
            xs.append(i + 1)
            ys.append(c.gen_index)
            content += c.token != rec.eos_id
        tpf.append(content / (i + 1))
    for reason, (xs, ys) in by_reason.items():
        data.append(dict(type="scatter", x=np.array(xs), y=np.array(ys), mode="markers",
                         name=f"{reason} ({len(xs)})", marker=dict(color=COLOURS[reason], size=6)))
    data.append(dict(type="scatter", x=np.arange(1, t + 1), y=np.array(tpf, dtype=np.float32),
                     name="TPF (cumulative)", line=dict(color="#333", width=1.5), yaxis="y2"))
    if (p := _chosen(rec, selected)) is not None:
        shapes.append(dict(type="line", xref="x domain", x0=0, x1=1, yref="y", y0=p, y1=p,
                           line=dict(color=SELECTED, width=1, dash="dot")))
        step = int(rec.commit_info()[0][p])
        if 0 < step <= t:
            data.append(dict(type="scatter", x=[step], y=[p], mode="markers", name=f"pos {p}", marker=dict(
                symbol="circle-open", size=14, color=SELECTED, line=dict(width=2))))
    # TPF on a second y axis over the same x axis, laid out by hand (make_subplots costs ~25 ms a frame), with
    # its own round ticks and no grid (plotly.js would otherwise sync them to the left axis's grid)
    return _figure(data, _layout(
        "Commit timeline", 380, "timeline", legend=True, shapes=shapes,
        xaxis=dict(domain=(0.0, 0.94), title=_title("step (forward)")),
        yaxis=dict(title=_title("generated position"), autorange="reversed"),
        yaxis2=dict(overlaying="y", side="right", anchor="x", title=_title("TPF"), rangemode="tozero",
                    tickmode="auto", showgrid=False)))


def staleness_curves(rec: RunRecord, t: int | None = None, selected: int | None = None) -> go.Figure:
    """Mean KV staleness per layer over steps (docs/algorithm.md §5); empty when staleness was not measured. The
    selected position's commit step as a vertical line (staleness is a per-layer mean, not per position)."""
    t = rec.n_steps if t is None else t
    data, shapes, notes = [], [], []
    series = [e.extra.get("staleness") for e in rec.events[:t]]
    if any(s is not None for s in series):
        width = len(next(s for s in series if s is not None))
        arr = np.array([np.mean(s, axis=1) if s is not None else np.full(width, np.nan)
                        for s in series], dtype=np.float32)  # [steps, layers]
        for layer, colour in zip(range(arr.shape[1]), layer_colours(arr.shape[1])):
            data.append(dict(type="scatter", x=np.arange(1, t + 1), y=arr[:, layer], name=f"layer {layer}",
                             mode="lines", line=dict(color=colour)))
    else:
        notes.append(dict(text="turn on 'measure staleness' to see how stale the cache gets", showarrow=False,
                          x=0.5, y=0.5, xref="paper", yref="paper"))
    if (p := _chosen(rec, selected)) is not None and 0 < (step := int(rec.commit_info()[0][p])) <= t:
        shapes.append(dict(type="line", x0=step, x1=step, xref="x", y0=0, y1=1, yref="y domain",
                           line=dict(color=SELECTED, width=1, dash="dot")))
        notes.append(dict(text=f"pos {p} committed", font=dict(size=10), x=step, xref="x", y=1, yref="y domain",
                          xanchor="left", yanchor="top", showarrow=False))
    return _figure(data, _layout(TITLES["staleness"], 380, "staleness", legend=True, shapes=shapes,
                                 annotations=notes, xaxis=dict(title=_title("step")),
                                 yaxis=dict(title=_title("1 − ½(cos K + cos V)"), rangemode="tozero")))


def pca_trajectories(rec: RunRecord, positions: list[int], t: int | None = None,
                     selected: int | None = None) -> go.Figure:
    """Last-layer value states of `positions` (and the selected one, drawn bold) across steps in one PCA basis
    (Fig 3c): ◆ first drift trigger (first step the position's last-layer drift is above the run's 90th
    percentile), ★ its commit step."""
    t = rec.n_steps if t is None else t
    data = []
    kept = rec.values[0].shape[0] if rec.values else 0  # a loaded trace keeps the first VALUE_POSITIONS
    chosen = _chosen(rec, selected)
    positions = list(dict.fromkeys([*positions, *([chosen] if chosen is not None else [])]))
    positions = [p for p in positions if 0 <= p < min(rec.gen_length, kept)]
    if len(rec.values) >= 2 and positions:
        stack = np.stack([v[positions] for v in rec.values]).astype(np.float32)  # [steps, P, kv]
        project = _pca_basis(stack.reshape(-1, stack.shape[-1]))
        steps, _ = rec.commit_info()
        last = np.stack([d[-1] for d in rec.drift])  # [steps, G]
        trigger_level = np.percentile(last, 90)
        for j, p in enumerate(positions):
            xy = project(stack[:t, j])
            bold = p == chosen
            colour = SELECTED if bold else OKABE_ITO[j % 7]  # the 8th Okabe–Ito colour, black, is the selection's
            data.append(dict(type="scatter", x=xy[:, 0], y=xy[:, 1], mode="lines+markers",
                             name=f"pos {p}" + (" (selected)" if bold else ""), marker=dict(size=6 if bold else 4),
                             line=dict(color=colour, width=4 if bold else 2)))
            above = np.nonzero(last[:t, p] > trigger_level)[0]
            if len(above):
                data.append(dict(type="scatter", x=xy[above[:1], 0], y=xy[above[:1], 1], mode="markers",
                                 showlegend=False, marker=dict(symbol="diamond", size=11, color=COLOURS["drift"],
                                                               line=dict(color="white", width=1))))
            if 0 < steps[p] <= t:
                k = steps[p] - 1
                data.append(dict(type="scatter", x=xy[k:k + 1, 0], y=xy[k:k + 1, 1], mode="markers",
                                 showlegend=False, marker=dict(symbol="star", size=13, color=COLOURS["forced"],
                                                               line=dict(color="black", width=1))))
    return _figure(data, _layout(TITLES["pca"], 380, "pca", legend=True, xaxis=dict(title=_title("PC 1")),
                                 yaxis=dict(title=_title("PC 2"))))


def _pca_basis(points: np.ndarray):
    """Projection onto the first two principal components of `points` [n, d] (fitted on all of them: one basis
    for every step). Each component's sign makes its largest-magnitude entry positive, so a basis is the same
    from frame to frame. An SVD in numpy: scikit-learn's PCA took ~0.1 s a call here, mostly input checks."""
    mean = points.mean(0, dtype=np.float64)
    _, _, vt = np.linalg.svd(points - mean, full_matrices=False)
    axes = vt[:2] * np.sign(vt[:2][np.arange(min(2, len(vt))), np.abs(vt[:2]).argmax(1)])[:, None]
    return lambda x: ((x - mean) @ axes.T).astype(np.float32)


_WAITING: dict[str, go.Figure] = {}


def at_the_end(*names: str) -> list[go.Figure]:
    """Placeholders for views drawn once a run ends (built once, reused by every frame)."""
    for name in names:
        if name not in _WAITING:
            _WAITING[name] = _figure([], _layout(
                TITLES[name], 380, name, xaxis=dict(visible=False), yaxis=dict(visible=False),
                annotations=[dict(text="drawn when the run ends", showarrow=False, x=0.5, y=0.5, xref="paper",
                                  yref="paper")]))
    return [_WAITING[name] for name in names]


def _cell_label(label: str, width: int = 3) -> str:
    """A canvas cell's label: a word token longer than a cell holds shortened with an ellipsis (the hover names it
    whole), so neighbouring labels do not run into each other."""
    return label if len(label) <= width else label[: width - 1] + "…"


def _display(rec: RunRecord, token: int) -> str:
    if token == rec.mask_id:
        return "▒"
    if token == rec.eos_id:
        return "∅"
    text = rec.vocab[token] if 0 <= token < len(rec.vocab) else str(token)
    return text.replace("Ġ", "␣").replace("Ċ", "⏎")


def _per_step(rec: RunRecord, t: int, kind: str) -> np.ndarray:
    """One number per step up to t: `staleness` (the mean over layers and cached rows, NaN where a step has none)
    or `drift` (the last layer's mean attention drift over the still-masked positions of that step)."""
    out = np.full(t, np.nan, dtype=np.float32)
    for i in range(min(t, rec.n_steps)):
        if kind == "staleness":
            s = rec.events[i].extra.get("staleness")
            out[i] = np.nan if s is None else float(np.mean(s))
        elif i < len(rec.drift):
            before = rec.canvases[i - 1] if i > 0 else np.full(rec.gen_length, rec.mask_id)
            masked = before == rec.mask_id  # the positions this step could still commit
            if masked.any():
                out[i] = float(rec.drift[i][-1][masked].mean())
    return out


COMPARE_COLOURS = ("#0072B2", "#D55E00")  # A, B (Okabe–Ito blue and vermillion)


def compare_overlay(a: RunRecord, b: RunRecord, t: int | None = None) -> go.Figure:
    """Two runs on one step axis: their mean KV staleness (top) and the mean attention drift of the positions
    still masked (bottom), each run up to step t (a run that finished earlier stops there), with the playhead."""
    t = max(a.n_steps, b.n_steps) if t is None else t
    # two rows on one x axis, laid out by hand (make_subplots costs ~25 ms a playhead move)
    data = []
    for rec, colour, dash in zip((a, b), COMPARE_COLOURS, ("solid", "dash")):
        shown = min(t, rec.n_steps)
        for axis, kind in (("y", "staleness"), ("y2", "drift")):
            data.append(dict(type="scatter", x=np.arange(1, shown + 1), y=_per_step(rec, shown, kind), mode="lines",
                             name=f"{rec.label} ({rec.n_steps} steps)", legendgroup=rec.label,
                             showlegend=axis == "y", line=dict(color=colour, dash=dash, width=2), xaxis="x",
                             yaxis=axis, hovertemplate=f"{rec.label}<br>step %{{x}}<br>%{{y:.3g}}<extra></extra>"))
    titles = [_panel_title(text, 0.5) | dict(y=domain[1])
              for text, domain in zip(("KV staleness (mean over layers and cached rows)",
                                       "attention drift of still-masked positions (last layer, mean KL)"),
                                      COMPARE_DOMAINS)]
    playhead = dict(type="line", x0=t, x1=t, xref="x", y0=0, y1=1, yref="paper",
                    line=dict(color=SELECTED, width=1, dash="dot"))
    return _figure(data, _layout(
        f"Staleness and drift, A against B — step {t}", 520, "compare", legend=True, annotations=titles,
        shapes=[playhead],
        xaxis=dict(anchor="y2", title=_title("step (forward)"), range=[0.5, max(a.n_steps, b.n_steps) + 0.5]),
        yaxis=dict(domain=COMPARE_DOMAINS[0], title=_title("1 − ½(cos K + cos V)"), rangemode="tozero"),
        yaxis2=dict(domain=COMPARE_DOMAINS[1], anchor="x", title=_title("KL"), rangemode="tozero")))


COMPARE_DOMAINS = ((0.54, 1.0), (0.0, 0.46))  # staleness above, drift below
