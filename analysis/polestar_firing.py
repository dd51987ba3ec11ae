"""When do Polestar-Commit's rules fire? Decode held-out examples with Polestar (defaults, or fields overridden
with --set) and report, per example, refresh steps, drift commits and suffix commits (EOS or content), and over
all steps the distributions the rules compare: block targets in the band τ_early < c < τ_s, their drift delta
Δ against the gate α(τ_s − c)² and δ_max, and the suffix candidates' confidence against τ_suffix.

Is the drift gate informative? For every band target and step, "gate_agreement" compares the token predicted
then with the token the decode finally commits at that position, split by whether the default gate would fire
(g ≤ Δ < δ_max) and by confidence. Run it with `--polestar-delta-max 0`, which keeps the drift rule's signals but
lets no drift commit fire: a would-fire token is then not committed on the spot, and agreement says whether
the drift rule would have committed what the decode later commits with more context (paper §3.2: a drift event
marks a token converging to its final prediction). With drift commits on, a fired token agrees by construction.

    python -m analysis.polestar_firing --task arith --n 100 --out reports/polestar_firing_arith.json
    python -m analysis.polestar_firing --task arith --n 20 --polestar-alpha 2.5 \
        --polestar-tau-early 0.5   # any DecodeConfig flag
    python -m analysis.polestar_firing --task arith --n 40 --polestar-delta-max 0 \
        --out reports/figures/drift_gate.json   # the gate's precision (a section of docs/findings.md)
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def _quantiles(values: list[float]) -> dict[str, float] | None:
    if len(values) < 2:
        return None
    q = statistics.quantiles(values, n=20)
    return {"p05": round(q[0], 4), "p25": round(q[4], 4), "p50": round(q[9], 4), "p75": round(q[14], 4),
            "p95": round(q[18], 4), "n": len(values)}


def _agreement(cells: dict[tuple[str, str, bool], list[int]]) -> dict[str, dict]:
    """Per gate outcome: how often the band token predicted at a step is the one finally committed there, over
    all examples, per confidence bin, and over the examples whose final answer is right."""
    out: dict[str, dict] = {}
    for gate in ("would fire", "would not fire"):
        mine = {key: v for key, v in cells.items() if key[0] == gate}

        def rate(pick) -> dict:
            agree, count = (sum(v[i] for key, v in mine.items() if pick(key)) for i in (0, 1))
            return {"agree": round(agree / count, 4) if count else None, "n": count}

        out[gate] = {"all": rate(lambda k: True), "right examples": rate(lambda k: k[2])} | {
            f"confidence {b}": rate(lambda k, b=b: k[1] == b) for b in sorted({k[1] for k in mine})}
    return out


def measure(model, task: str, n: int, overrides: dict, model_path: str | None = None) -> dict:
    import polestar
    from polestar import tasks
    from analysis.commit_reliability import band_of
    from analysis.figio import settings
    from polestar.config import DecodeConfig, resolve

    cfg = resolve("polestar", **overrides)
    default_delta_max = DecodeConfig().polestar_delta_max
    per_example, band, band_delta, band_gate, band_fire, suffix_conf = [], 0, [], [], 0, []
    in_band_total = below_band = above = 0
    agreement: dict[tuple[str, str, bool], list[int]] = {}  # (gate, confidence bin, example right) -> [agree, n]
    for ex in tasks.make(task, n, seed=0):
        r = polestar.generate(model, ex.prompt, cfg, trace=True)
        correct = tasks.score(task, ex, r.text)
        per_example.append(r.counters.as_dict() | {"correct": correct, "nfe": r.nfe})
        final = r.token_ids
        for event in r.trace.events:
            columns = event.extra
            suffix_conf += columns.get("extra_confidence", [])
            if "drift_delta" not in columns:
                continue
            for pos, c, d, g, token in zip(columns["targets"], columns["confidence"], columns["drift_delta"],
                                           columns["drift_gate"], columns["prediction"]):
                if c <= cfg.polestar_tau_early:
                    below_band += 1
                elif c >= cfg.tau_s:
                    above += 1
                else:
                    in_band_total += 1
                    band_delta.append(d)
                    band_gate.append(g)
                    band += d >= g
                    band_fire += cfg.polestar_tau_early < c < cfg.tau_s and g <= d < cfg.polestar_delta_max
                    gate = "would fire" if g <= d < default_delta_max else "would not fire"
                    cell = agreement.setdefault((gate, band_of(c), bool(correct)), [0, 0])
                    cell[0] += token == final[pos - r.trace.prompt_len]
                    cell[1] += 1
    examples = len(per_example)
    mean = {k: round(sum(e[k] for e in per_example) / examples, 3) for k in per_example[0] if k != "correct"}
    return {
        "task": task, "n": examples, "overrides": overrides,
        "settings": settings(examples, task, cfg.gen_length, model_path),
        "accuracy": sum(e["correct"] for e in per_example) / examples,
        "mean_per_example": mean,
        "examples_with_drift_commit": sum(e["drift_commits"] > 0 for e in per_example) / examples,
        "examples_with_content_suffix_commit": sum(e["suffix_commits"] > e["suffix_eos_commits"]
                                                   for e in per_example) / examples,
        "block_targets": {"c <= tau_early": below_band, "in band": in_band_total, "c >= tau_s": above,
                          "in band with delta >= gate": band, "in band, gate <= delta < delta_max": band_fire},
        "band_delta": _quantiles(band_delta), "band_gate": _quantiles(band_gate),
        "suffix_candidates": len(suffix_conf),
        "suffix_candidates_at_or_above_tau_suffix": sum(c >= cfg.polestar_tau_suffix for c in suffix_conf),
        "suffix_confidence": _quantiles(suffix_conf),
        "gate_agreement": _agreement(agreement),
        "per_example": per_example,
    }


def main(argv: list[str] | None = None) -> None:
    import torch

    import dataclasses

    import polestar
    from polestar.cli_args import add_config_args
    from polestar.config import DecodeConfig

    p = argparse.ArgumentParser(prog="python -m analysis.polestar_firing", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=polestar.DEFAULT_MODEL)
    p.add_argument("--task", default="arith")
    p.add_argument("--n", type=int, default=100)
    add_config_args(p, DecodeConfig)  # overrides of Polestar's defaults
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="write the full result (per-example rows too) as JSON")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = polestar.load_model(args.model)
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(DecodeConfig)
                 if getattr(args, f.name) is not None}
    result = measure(model, args.task, args.n, overrides,
                     None if args.model == polestar.DEFAULT_MODEL else str(args.model))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "per_example"}))


if __name__ == "__main__":
    main()
