"""Fig 3: (a) where the KV cache goes stale: staleness E of cached entries against their attention drift since the
entry was written and against their distance to the block; (b, c) drift events against convergence: the step of a
position's largest attention drift against the step from which its fresh prediction no longer changes, and the
PCA trajectories of a few positions' last-layer values with both steps marked.

    python -m analysis.fig3_drift_staleness --n 10 --out reports/figures

One cached trajectory per example (Fast-dLLM dual cache, `analysis.drift_probe`). Layers 1 and up (layer 0's K/V
depend on the token alone).
"""

from __future__ import annotations

import random

import torch

from analysis import drift_probe, figio

NAME = "fig3_drift_staleness"
DISTANCE_BINS = ((1, 32), (33, 64), (65, 128), (129, 10_000))


def staleness_pairs(recs, length: int) -> tuple[list[float], list[float], list[int]]:
    """(drift since entry, staleness, distance to the block) of every cached generated-region entry, layers ≥ 1."""
    drift, stale, dist = [], [], []
    for rec in recs:
        if rec.kl_entry is None:
            continue
        pos = torch.arange(length)
        outside = (pos < rec.block_start) | (pos >= rec.block_end)
        cached = pos[outside & (pos >= recs[0].block_start)]  # generated region, outside the block
        d = torch.where(cached < rec.block_start, rec.block_start - cached, cached - rec.block_end + 1)
        for layer in range(1, rec.staleness.shape[0]):
            drift += rec.kl_entry[layer, cached].tolist()
            stale += rec.staleness[layer, cached].tolist()
            dist += d.tolist()
    return drift, stale, dist


def convergence(recs, final: torch.Tensor, prompt_len: int) -> list[dict]:
    """Per generated position committed after the first step: the step its fresh prediction settles on the final
    token for good (onset), the step of its largest layer-mean drift before its commit, and their gap."""
    committed_at = {}
    for t, rec in enumerate(recs):
        for p in rec.committed:
            committed_at.setdefault(p, t)
    out = []
    for p, c in committed_at.items():
        if c < 2:
            continue
        preds = [int(recs[t].prediction[p]) for t in range(c)]  # fresh predictions before the commit
        onset = c
        while onset > 0 and preds[onset - 1] == int(final[p]):
            onset -= 1
        drifts = [float(recs[t].kl_step[1:, p].mean()) if recs[t].kl_step is not None else 0.0 for t in range(c)]
        peak = max(range(1, c), key=lambda t: drifts[t])
        out.append({"position": p - prompt_len, "commit_step": c, "onset_step": onset, "peak_drift_step": peak,
                    "gap": peak - onset, "random_gap": random.Random(p).randint(1, c - 1) - onset})
    return out


def _spearman(x: list[float], y: list[float]) -> float:
    def ranks(v):
        order = sorted(range(len(v)), key=v.__getitem__)
        r = [0.0] * len(v)
        for i, j in enumerate(order):
            r[j] = float(i)
        return r

    rx, ry = ranks(x), ranks(y)
    mx, my = figio.mean(rx), figio.mean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den else float("nan")


def main(argv: list[str] | None = None) -> None:
    args = figio.parser(__doc__.split("\n\n")[0], n=10).parse_args(argv)
    model = figio.setup(args)
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    drift, stale, dist, conv, first = [], [], [], [], None
    for i, ex in enumerate(figio.examples(args)):
        rec, out = drift_probe.record(model, ex.prompt, "fast-dllm", gen_length=args.gen_length)
        d, s, di = staleness_pairs(rec.records, out.canvas.shape[1])
        drift, stale, dist = drift + d, stale + s, dist + di
        conv += [{"example": i, **row} for row in convergence(rec.records, out.canvas[0], out.prompt_len)]
        first = first or (rec, out)
    # (a) staleness by drift quintile and by distance bin
    order = sorted(drift)
    edges = [order[int(q * (len(order) - 1))] for q in (0.2, 0.4, 0.6, 0.8)]
    rows = []
    for q in range(5):
        lo = edges[q - 1] if q else float("-inf")
        hi = edges[q] if q < 4 else float("inf")
        sel = [s for d, s in zip(drift, stale) if lo < d <= hi or (q == 0 and d <= hi)]
        if not sel:  # tied edges (many entries with the same drift) leave a quintile empty
            continue
        rows.append({"panel": "a_drift", "bin": f"Q{q + 1}", "mean_staleness": figio.mean(sel), "count": len(sel)})
    for lo, hi in DISTANCE_BINS:
        sel = [s for d, s in zip(dist, stale) if lo <= d <= hi]
        if sel:  # a short canvas has no far bins
            rows.append({"panel": "a_distance", "bin": f"{lo}-{hi}" if hi < 10_000 else f">{lo - 1}",
                         "mean_staleness": figio.mean(sel), "count": len(sel)})
    near = sum(abs(r["gap"]) <= 1 for r in conv) / max(1, len(conv))
    chance = sum(abs(r["random_gap"]) <= 1 for r in conv) / max(1, len(conv))
    summary = {"entries": len(stale), "spearman_staleness_drift": _spearman(drift, stale),
               "spearman_staleness_distance": _spearman(dist, stale), "positions": len(conv),
               "peak_within_1_of_onset": near, "random_step_within_1_of_onset": chance,
               "peak_before_onset": sum(r["gap"] < 0 for r in conv) / max(1, len(conv))}
    fig = make_subplots(rows=1, cols=3, subplot_titles=(
        "(a) staleness of cached entries", "(b) largest drift step − convergence onset", "(c) PCA of last-layer V"))
    a_d = [r for r in rows if r["panel"] == "a_drift"]
    a_x = [r for r in rows if r["panel"] == "a_distance"]
    fig.add_trace(go.Bar(x=[r["bin"] for r in a_d], y=[r["mean_staleness"] for r in a_d], name="by drift quintile",
                         marker_color="#0072B2"), 1, 1)
    fig.add_trace(go.Bar(x=[r["bin"] for r in a_x], y=[r["mean_staleness"] for r in a_x],
                         name="by distance to the block (positions)", marker_color="#E69F00"), 1, 1)
    fig.add_trace(go.Histogram(x=[r["gap"] for r in conv], name="largest drift", marker_color="#0072B2",
                               opacity=0.7, xbins={"size": 1}), 1, 2)
    fig.add_trace(go.Histogram(x=[r["random_gap"] for r in conv], name="random step", marker_color="#999999",
                               opacity=0.5, xbins={"size": 1}), 1, 2)
    _pca_panel(fig, first[0], first[1], [r for r in conv if r["example"] == 0])
    fig.update_yaxes(title_text="mean staleness E", row=1, col=1)
    fig.update_xaxes(title_text="steps (negative: drift first)", row=1, col=2)
    fig.update_yaxes(title_text="positions", row=1, col=2)
    fig.update_xaxes(title_text="PC 1", row=1, col=3)
    fig.update_yaxes(title_text="PC 2", row=1, col=3)
    fig.update_layout(title=f"Drift, staleness and convergence ({args.task}, n = {args.n}, Fast-dLLM dual cache)",
                      barmode="overlay", height=480, width=1400)
    figio.write(args, NAME, rows + conv, summary, fig)
    print({k: round(v, 3) if isinstance(v, float) else v for k, v in summary.items()})


def _pca_panel(fig, rec, out, conv: list[dict], n_positions: int = 4) -> None:
    import plotly.graph_objects as go

    chosen = sorted(conv, key=lambda r: -r["commit_step"])[:n_positions]
    if not chosen:
        return
    traj = torch.stack([r.values for r in rec.records])  # [steps, gen, kv_dim]
    points = torch.cat([traj[:, c["position"]] for c in chosen])
    centred = points - points.mean(0)
    _, _, v = torch.linalg.svd(centred, full_matrices=False)
    colours = ("#0072B2", "#D55E00", "#009E73", "#CC79A7")
    for c, colour in zip(chosen, colours):
        xy = (traj[: c["commit_step"] + 1, c["position"]] - points.mean(0)) @ v[:2].T
        fig.add_trace(go.Scatter(x=xy[:, 0].tolist(), y=xy[:, 1].tolist(), mode="lines+markers",
                                 name=f"position {c['position']}", line={"color": colour}, marker={"size": 4}), 1, 3)
        for step, symbol, label in ((c["peak_drift_step"], "star", "largest drift"),
                                    (c["onset_step"], "diamond", "onset")):
            fig.add_trace(go.Scatter(x=[float(xy[step, 0])], y=[float(xy[step, 1])], mode="markers",
                                     marker={"symbol": symbol, "size": 12, "color": colour}, name=label,
                                     showlegend=c is chosen[0]), 1, 3)


if __name__ == "__main__":
    main()
