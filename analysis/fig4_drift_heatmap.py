"""Fig 4: attention drift over the decode, step × generated position, for one example (layer mean; the first
layer whose K/V change at all, 1, to the last), and how the drift is spread: inside the block, in Polestar's
local window outside it, and beyond, over all n examples.

    python -m analysis.fig4_drift_heatmap --n 10 --out reports/figures

One cached trajectory per example (Fast-dLLM dual cache, `analysis.drift_probe`); drift D_{i,ℓ}(t) is the mean over
heads of KL(A_i(t) ‖ A_i(t−1)) of a fresh forward's rotary attention (paper Eq. 4).
"""

from __future__ import annotations

import torch

from analysis import drift_probe, figio

NAME = "fig4_drift_heatmap"
REGIONS = ("block", "window", "beyond")


def main(argv: list[str] | None = None) -> None:
    args = figio.parser(__doc__.split("\n\n")[0], n=10).parse_args(argv)
    model = figio.setup(args)
    import plotly.graph_objects as go

    from polestar.config import resolve

    cfg = resolve("polestar", gen_length=args.gen_length)
    rows, mass, heat = [], {r: 0.0 for r in REGIONS}, None
    for i, ex in enumerate(figio.examples(args)):
        rec, out = drift_probe.record(model, ex.prompt, "fast-dllm", gen_length=args.gen_length)
        p, length = out.prompt_len, out.canvas.shape[1]
        steps = [r for r in rec.records if r.kl_step is not None]
        for t, r in enumerate(steps, start=1):
            drift = r.kl_step[1:].mean(0)  # [length]
            win = drift_probe.window(r, cfg, length)
            inside = drift[r.block_start:r.block_end].sum().item()
            near = drift[win[win >= p]].sum().item() if len(win) else 0.0
            total = drift[p:].sum().item()
            mass["block"] += inside
            mass["window"] += near
            beyond = max(0.0, total - inside - near)  # ≥ 0 up to rounding
            mass["beyond"] += beyond
            rows.append({"example": i, "step": t, "block": r.block, "committed": len(r.committed),
                         "drift_block": inside / cfg.block_length,
                         "drift_window": near / max(1, int((win >= p).sum())),
                         "drift_beyond": beyond / max(1, length - p - cfg.block_length
                                                                        - int((win >= p).sum()))})
        if heat is None:
            heat = torch.stack([r.kl_step[1:].mean(0)[p:] for r in steps])
    total = sum(mass.values()) or 1.0
    summary = {"steps": len(rows), "drift_share": {k: v / total for k, v in mass.items()},
               "mean_per_position": {k: figio.mean(r[f"drift_{k}"] for r in rows) for k in REGIONS}}
    fig = go.Figure(go.Heatmap(z=heat.tolist(), colorscale="Viridis", colorbar={"title": "KL (nats)"},
                               x=list(range(heat.shape[1])), y=list(range(1, heat.shape[0] + 1)),
                               hovertemplate="step %{y}<br>position %{x}<br>drift %{z:.4f}<extra></extra>"))
    fig.update_layout(title=f"Attention drift of {args.task} example 0, layers 1–{model.spec.n_layers - 1} mean<br>"
                            f"<sub>share of all drift over the {args.n} examples: current block "
                            f"{100 * summary['drift_share']['block']:.0f} %, local window "
                            f"{100 * summary['drift_share']['window']:.0f} %, beyond "
                            f"{100 * summary['drift_share']['beyond']:.0f} %</sub>",
                      xaxis_title="generated position", yaxis_title="step", height=560)
    figio.write(args, NAME, rows, summary, fig)
    print(summary)


if __name__ == "__main__":
    main()
