"""Fig 8: multi-token decoding induces local drift. (a) Drift in the block and its local window after a step,
grouped by how many tokens that step committed (share of steps per group above the boxes); (b) one example's
trajectory: local drift and tokens committed per step.

    python -m analysis.fig8_multitoken_drift --n 10 --out reports/figures

One trajectory per example with Fast-dLLM's threshold commits (`analysis.drift_probe`, dual cache); the drift at
step t compares a fresh forward's attention after step t's commits with the one after step t − 1's (Eq. 4,
layer mean from layer 1, over the current block and Polestar's local window).
"""

from __future__ import annotations

import torch

from analysis import drift_probe, figio

NAME = "fig8_multitoken_drift"
GROUPS = ("1", "2", "3", "4+")


def _group(n: int) -> str:
    return GROUPS[min(n, 4) - 1]


def main(argv: list[str] | None = None) -> None:
    args = figio.parser(__doc__.split("\n\n")[0], n=10).parse_args(argv)
    model = figio.setup(args)
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from polestar.config import resolve

    cfg = resolve("polestar", gen_length=args.gen_length)
    rows = []
    for i, ex in enumerate(figio.examples(args)):
        rec, out = drift_probe.record(model, ex.prompt, "fast-dllm", gen_length=args.gen_length)
        for t, r in enumerate(rec.records):
            if r.kl_step is None or not r.committed:
                continue
            block = torch.arange(r.block_start, r.block_end)
            local = torch.cat([block, drift_probe.window(r, cfg, out.canvas.shape[1])])
            local = local[local >= out.prompt_len]
            rows.append({"example": i, "step": t, "committed": len(r.committed), "group": _group(len(r.committed)),
                         "local_drift": float(r.kl_step[1:, local].mean())})
    by = {g: [r["local_drift"] for r in rows if r["group"] == g] for g in GROUPS}
    summary = {"steps": len(rows), "share": {g: len(v) / max(1, len(rows)) for g, v in by.items()},
               "median_drift": {g: (sorted(v)[len(v) // 2] if v else float("nan")) for g, v in by.items()},
               "mean_drift": {g: figio.mean(v) for g, v in by.items()}}
    fig = make_subplots(rows=1, cols=2, subplot_titles=("(a) local drift by tokens committed in the step",
                                                        "(b) example 0: drift and commits per step"),
                        specs=[[{}, {"secondary_y": True}]])
    for g in GROUPS:
        fig.add_trace(go.Box(y=by[g], name=f"{g} ({100 * summary['share'][g]:.0f} %)", marker_color="#0072B2",
                             showlegend=False), 1, 1)
    ex0 = [r for r in rows if r["example"] == 0]
    fig.add_trace(go.Scatter(x=[r["step"] for r in ex0], y=[r["local_drift"] for r in ex0], mode="lines",
                             name="local drift", line={"color": "#0072B2"}), 1, 2)
    fig.add_trace(go.Bar(x=[r["step"] for r in ex0], y=[r["committed"] for r in ex0], name="tokens committed",
                         marker_color="#E69F00", opacity=0.5), 1, 2, secondary_y=True)
    fig.update_yaxes(title_text="drift (KL, nats)", row=1, col=1)
    fig.update_xaxes(title_text="tokens committed in the step (share of steps)", row=1, col=1)
    fig.update_xaxes(title_text="step", row=1, col=2)
    fig.update_yaxes(title_text="drift (KL, nats)", row=1, col=2)
    fig.update_yaxes(title_text="tokens committed", row=1, col=2, secondary_y=True, rangemode="tozero", showgrid=False,
                     tickmode="linear", tick0=0, dtick=5)
    fig.update_yaxes(rangemode="tozero", row=1, col=2, secondary_y=False)
    fig.update_layout(title=f"Multi-token steps and local drift ({args.task}, n = {args.n}, Fast-dLLM)", height=480,
                      width=1300)
    figio.write(args, NAME, rows, summary, fig)
    print(summary)


if __name__ == "__main__":
    main()
