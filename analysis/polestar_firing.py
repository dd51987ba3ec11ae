"""When do Polestar-Commit's rules fire? Decode held-out examples with Polestar (defaults, or fields overridden
with --set) and report, per example, refresh steps, drift commits and suffix commits (EOS or content), and over
all steps the distributions the rules compare: block targets in the band τ_early < c < τ_s, their drift delta
Δ against the gate α(τ_s − c)² and δ_max, and the suffix candidates' confidence against τ_suffix.

    python -m analysis.polestar_firing --task arith --n 100 --out reports/polestar_firing_arith.json
    python -m analysis.polestar_firing --task arith --n 20 --polestar-alpha 2.5 \
        --polestar-tau-early 0.5   # any DecodeConfig flag
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


def measure(model, task: str, n: int, overrides: dict) -> dict:
    import polestar
    from polestar import tasks
    from polestar.config import resolve

    cfg = resolve("polestar", **overrides)
    per_example, band, band_delta, band_gate, band_fire, suffix_conf = [], 0, [], [], 0, []
    in_band_total = below_band = above = 0
    for ex in tasks.make(task, n, seed=0):
        r = polestar.generate(model, ex.prompt, cfg, trace=True)
        per_example.append(r.counters.as_dict() | {"correct": tasks.score(task, ex, r.text), "nfe": r.nfe})
        for event in r.trace.events:
            columns = event.extra
            suffix_conf += columns.get("extra_confidence", [])
            if "drift_delta" not in columns:
                continue
            for c, d, g in zip(columns["confidence"], columns["drift_delta"], columns["drift_gate"]):
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
    examples = len(per_example)
    mean = {k: round(sum(e[k] for e in per_example) / examples, 3) for k in per_example[0] if k != "correct"}
    return {
        "task": task, "n": examples, "overrides": overrides,
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
    result = measure(model, args.task, args.n, overrides)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "per_example"}))


if __name__ == "__main__":
    main()
