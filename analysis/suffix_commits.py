"""Suffix commits: a stale packet, or a model sure of digits it cannot know yet? Polestar (defaults) decodes held-out
`arith` examples; every content suffix commit's token (from the final-layer update packet) is set beside a fresh full
forward over the canvas the packet saw, and every computed digit a suffix commit wrote is judged as in
`analysis.commit_reliability`.

    python -m analysis.suffix_commits --n 80 --out reports/figures

The paper commits a suffix position when drift made it eligible and its packet confidence is ≥ τ_suffix ("drift
determines which suffix positions become eligible, confidence which are safe to commit", §4.2). On the embedded
model a suffix digit is wrong more often than a threshold commit's (`docs/findings.md`, commit reliability). Two
explanations: the packet recomputes only the final layer for the chosen clusters, from cached (quantized,
possibly stale) inputs, so its logits may differ from what the model would say; or the model itself is sure of a
digit whose inputs are still masked. The fresh forward tells them apart: same token at ≥ τ_suffix means the packet
said what the model says. It runs in the step callback (excluded from wall time, NFE unchanged) on the step's input
canvas: the canvas after the step with the step's own commits masked again.
"""

from __future__ import annotations

from analysis import figio
from analysis.commit_reliability import _tally, commit_of_each_digit, digit_verdicts, token_of_char, traced_commits

NAME = "suffix_commits"
AGREEMENT = ("same token, fresh ≥ τ_suffix", "same token, fresh < τ_suffix", "other token")
ORDERS = ("inputs committed first", "an input not yet committed")


def fresh_views(model):
    """An `on_step` callback that records, for each suffix commit of a step, the fresh forward's token and
    confidence at its position over the step's input canvas: {position: (token, confidence)}."""
    import torch

    seen: dict[int, tuple[int, float]] = {}

    def on_step(event, canvas) -> None:
        suffix = [c for c in event.commits if c.reason == "suffix"]
        if not suffix:
            return
        before = canvas.clone()
        before[0, [c.position for c in event.commits]] = model.mask_id
        with torch.no_grad():
            probs = model.forward(before)[0, [c.position for c in suffix]].float().softmax(-1)
        confidence, token = probs.max(-1)
        for c, t, p in zip(suffix, token.tolist(), confidence.tolist()):
            seen[c.position] = (t, p)

    return seen, on_step


def agreement(packet_token: int, fresh: tuple[int, float], tau: float) -> str:
    token, confidence = fresh
    return AGREEMENT[0 if token == packet_token and confidence >= tau else 1 if token == packet_token else 2]


def measure(model, examples, gen_length: int) -> tuple[list[dict], dict]:
    import polestar
    from polestar import tasks
    from polestar.config import resolve

    cfg = resolve("polestar", gen_length=gen_length)
    tau = cfg.polestar_tau_suffix
    rows, right, tallies = [], 0, {}  # tallies: key -> (seen, wrong), as in commit_reliability
    for i, ex in enumerate(examples):
        seen, on_step = fresh_views(model)
        r = polestar.generate(model, ex.prompt, cfg, on_step=on_step)
        right += tasks.score("arith", ex, r.text)
        pieces, commits = traced_commits(model, r)
        _, token_at = token_of_char(pieces)
        judged = {}  # generated index -> (every input committed by an earlier forward, right)
        for reason, _, first, v in commit_of_each_digit(pieces, commits, digit_verdicts("".join(pieces))):
            if reason in ("threshold", "suffix"):
                _tally(tallies, (reason, "all"), v.right)
            if reason == "suffix":
                judged[token_at(v.offset)] = (first, v.right)
        block_end = lambda block: r.trace.prompt_len + (block + 1) * cfg.block_length  # noqa: E731
        for e in r.trace.events:
            for c in e.commits:
                if c.reason != "suffix" or c.token == model.eos_id:
                    continue
                kind = agreement(c.token, seen[c.position], tau)
                _tally(tallies, ("agreement", kind), True)
                row = {"example": i, "nfe": e.nfe, "gen_index": c.gen_index,
                       "past_block_end": c.position - block_end(e.block), "packet_confidence": c.confidence,
                       "fresh_confidence": seen[c.position][1], "agreement": kind, "digit": 0, "right": "",
                       "inputs_first": ""}
                if c.gen_index in judged:
                    first, ok = judged[c.gen_index]
                    row.update(digit=1, right=int(ok), inputs_first=int(first))
                    _tally(tallies, ("suffix digit", kind), ok)
                    _tally(tallies, ("suffix digit", ORDERS[0] if first else ORDERS[1]), ok)
                rows.append(row)
    n_suffix = sum(n for (k, _), (n, _) in tallies.items() if k == "agreement")

    def rate(key) -> dict:
        n, wrong = tallies.get(key, (0, 0))
        return {"n": n, "wrong": wrong, "wrong_rate": wrong / n if n else None}

    summary = {"accuracy": right / max(1, len(examples)), "tau_suffix": tau,
               "content_suffix_commits": n_suffix, "per_example": n_suffix / max(1, len(examples)),
               "agreement_share": {k: tallies.get(("agreement", k), (0, 0))[0] / n_suffix if n_suffix else None
                                   for k in AGREEMENT},
               "threshold_digits": rate(("threshold", "all")), "suffix_digits": rate(("suffix", "all")),
               "suffix_digits_by_agreement": {k: rate(("suffix digit", k)) for k in AGREEMENT},
               "suffix_digits_by_order": {k: rate(("suffix digit", k)) for k in ORDERS}}
    return rows, summary


def figure(summary: dict, title: str):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, column_widths=[0.4, 0.6], horizontal_spacing=0.12,
                        subplot_titles=("content suffix commits: a fresh forward's token",
                                        "wrong computed digits by how they were committed"))
    shares = summary["agreement_share"]
    fig.add_trace(go.Bar(x=list(AGREEMENT), y=[100 * (shares[k] or 0) for k in AGREEMENT], marker_color="#0072B2",
                         name="share of suffix commits", showlegend=False), 1, 1)
    groups = {"threshold commits": summary["threshold_digits"], "suffix commits": summary["suffix_digits"],
              **{f"suffix, {k}": v for k, v in summary["suffix_digits_by_order"].items()},
              **{f"suffix, {k}": v for k, v in summary["suffix_digits_by_agreement"].items()}}
    fig.add_trace(go.Bar(x=list(groups), y=[100 * v["wrong_rate"] if v["wrong_rate"] is not None else None
                                            for v in groups.values()],
                         text=[f"n = {v['n']:,}" for v in groups.values()], textposition="outside",
                         marker_color=["#555555", "#D55E00"] + ["#E69F00"] * (len(groups) - 2), showlegend=False), 1, 2)
    fig.update_yaxes(title_text="share (%)", row=1, col=1, range=[0, 105])
    fig.update_yaxes(title_text="wrong digits (%)", row=1, col=2, rangemode="tozero")
    fig.update_xaxes(tickangle=-25)
    fig.update_layout(title=title, height=560, width=1300, template="plotly_white")
    return fig


def main(argv: list[str] | None = None) -> None:
    args = figio.parser(__doc__.split("\n\n")[0], n=80).parse_args(argv)
    if args.task != "arith":
        raise SystemExit("suffix_commits judges arith scratchpads: run it with --task arith")
    model = figio.setup(args)
    rows, summary = measure(model, figio.examples(args), args.gen_length)
    fig = figure(summary, f"Polestar's suffix commits against a fresh forward (arith, n = {args.n}, generation "
                          f"{args.gen_length})")
    figio.write(args, NAME, rows, summary, fig)
    print(summary)


if __name__ == "__main__":
    main()
