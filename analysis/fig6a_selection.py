"""Fig 6a: which signal finds the stale KV-cache entries? Precision at selecting the top-25 % most stale positions
of Polestar's local window, per layer and step, on one cached trajectory (a Fast-dLLM dual cache: every entry
outside the block is written at block entry and goes stale until the next).

    python -m analysis.fig6a_selection --n 10 --out reports/figures

Signals (`analysis.drift_probe`, all from the same fresh forward after each step): attention KL drift since the
block entry (when the entry was written) and since the last step, Elastic-Cache's cosine change of the
most-attended token, the prediction's entropy (uncertainty), random, and a positional rule (the window positions
nearest the block). Truth: the staleness E of the cached K/V against a full recompute. Layer 0 is left out: its
K/V depend on the token alone, so nothing there is stale unless the token changed.
"""

from __future__ import annotations

import torch

from analysis import drift_probe, figio

NAME = "fig6a_selection"
SIGNALS = ("kl_entry", "kl_step", "cosine", "uncertainty", "random", "nearest_block")
LABELS = {"kl_entry": "KL drift since entry", "kl_step": "KL drift, last step", "cosine": "cosine (most-attended)",
          "uncertainty": "uncertainty (entropy)", "random": "random", "nearest_block": "nearest the block"}
PAPER = {"kl_entry": 0.86}  # the paper's KL-drift precision (its Fig 6a; the others are read off its bars)
FRACTION = 0.25


def rows_of(rec: drift_probe.StepRecord, cfg, length: int, example: int, generator: torch.Generator) -> list[dict]:
    cands = drift_probe.window(rec, cfg, length)
    if rec.kl_entry is None or rec.kl_step is None or len(cands) < 4:
        return []
    k = max(1, round(FRACTION * len(cands)))
    distance = torch.where(cands < rec.block_start, rec.block_start - cands, cands - rec.block_end + 1).float()
    out = []
    for layer in range(1, rec.staleness.shape[0]):
        stale = rec.staleness[layer, cands]
        if float(stale.max() - stale.min()) < 1e-6:
            continue
        truth = set(cands[stale.topk(k).indices].tolist())
        scores = {"kl_entry": rec.kl_entry[layer, cands], "kl_step": rec.kl_step[layer, cands],
                  "cosine": rec.cos_attended[layer, cands], "uncertainty": rec.entropy[cands],
                  "random": torch.rand(len(cands), generator=generator), "nearest_block": -distance}
        row = {"example": example, "block": rec.block, "step": rec.step, "layer": layer, "candidates": len(cands),
               "k": k}
        for name, score in scores.items():
            picked = set(cands[score.topk(k).indices].tolist())
            row[f"precision_{name}"] = len(picked & truth) / k
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> None:
    args = figio.parser(__doc__.split("\n\n")[0], n=10).parse_args(argv)
    model = figio.setup(args)
    import plotly.graph_objects as go

    from polestar.config import resolve

    cfg = resolve("polestar", gen_length=args.gen_length)
    generator = torch.Generator().manual_seed(0)
    rows = []
    for i, ex in enumerate(figio.examples(args)):
        rec, out = drift_probe.record(model, ex.prompt, "fast-dllm", gen_length=args.gen_length)
        for r in rec.records:
            rows += rows_of(r, cfg, out.canvas.shape[1], i, generator)
    summary = {"steps_layers": len(rows),
               "precision": {s: figio.mean(r[f"precision_{s}"] for r in rows) for s in SIGNALS},
               "ci95": {s: figio.ci95(r[f"precision_{s}"] for r in rows) for s in SIGNALS},
               "paper": PAPER, "fraction": FRACTION}
    fig = go.Figure(go.Bar(x=[LABELS[s] for s in SIGNALS], y=[100 * summary["precision"][s] for s in SIGNALS],
                           error_y={"type": "data", "array": [100 * summary["ci95"][s] for s in SIGNALS]},
                           marker_color="#0072B2", name="ours"))
    fig.add_trace(go.Scatter(x=[LABELS["kl_entry"]], y=[100 * PAPER["kl_entry"]], mode="markers",
                             marker={"symbol": "star", "size": 14, "color": "#D55E00"}, name="paper (LLaDA-8B)"))
    fig.add_hline(y=100 * FRACTION, line_dash="dot", annotation_text="chance (25 %)", annotation_position="top left")
    fig.update_layout(title=f"Selecting the top-25 % stale KV entries of the local window ({args.task}, n = "
                            f"{args.n}, {len(rows)} step×layer cases)", yaxis_title="precision (%)",
                      yaxis_range=[0, 100], height=480)
    figio.write(args, NAME, rows, summary, fig)
    print({s: round(v, 3) for s, v in summary["precision"].items()})


if __name__ == "__main__":
    main()
