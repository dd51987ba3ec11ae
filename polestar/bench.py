"""`python -m polestar bench`: accuracy, TPF and TPS of several methods on held-out task examples.

Methods are interleaved per example (every method decodes example i before any decodes example i+1), so
machine noise hits all alike; speed-ups are ratios of TPS within this one run. One warm-up decode per
method is excluded. Every CSV row carries the config, versions, git SHA, machine and timestamp.
"""

from __future__ import annotations

import csv
import json
import platform
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from polestar import tasks
from polestar.api import generate
from polestar.config import resolve


def provenance() -> dict[str, Any]:
    import torch
    import transformers

    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu x{torch.get_num_threads()}"
    return {"git_sha": sha or "unknown", "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "machine": f"{platform.machine()} {platform.processor()}".strip(),
            "device": device, "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def run_bench(model, suites: list[str], n: int, methods: list[str], seed: int, overrides: dict[str, Any],
              progress: bool = True) -> list[dict[str, Any]]:
    configs = {m: resolve(m, **overrides) for m in methods}
    stamp = provenance()
    for m in methods:  # warm-up, excluded
        generate(model, "Copy the list: 1 2 3 4", configs[m])
    rows = []
    work = [(suite, ex) for suite in suites for ex in tasks.make(suite, n, seed)]
    bar = _progress(len(work) * len(methods), progress)
    for i, (suite, ex) in enumerate(work):
        for m in methods:
            r = generate(model, ex.prompt, configs[m])
            rows.append({"suite": suite, "example": i, "method": m, "correct": tasks.score(suite, ex, r.text),
                         "nfe": r.nfe, "content_tokens": round(r.tpf * r.nfe), "tokens_per_step": r.tokens_per_step,
                         "wall_s": r.wall_s, "config": json.dumps(asdict(configs[m]), default=str), **stamp})
            bar.update(1)
    bar.close()
    return rows


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, disable=not enabled, file=sys.stderr, desc="bench", unit="decode")


def summarise(rows: list[dict[str, Any]], baseline: str = "baseline") -> list[dict[str, Any]]:
    """Per suite × method: accuracy, TPF, tokens/step, TPS and speed-up over `baseline` (same run)."""
    table = []
    for suite in dict.fromkeys(r["suite"] for r in rows):
        per = {}
        for m in dict.fromkeys(r["method"] for r in rows):
            sel = [r for r in rows if r["suite"] == suite and r["method"] == m]
            tokens, nfe, wall = (sum(r[k] for r in sel) for k in ("content_tokens", "nfe", "wall_s"))
            per[m] = {"suite": suite, "method": m, "n": len(sel),
                      "accuracy": sum(r["correct"] for r in sel) / len(sel), "tpf": tokens / nfe,
                      "tokens_per_step": sum(r["tokens_per_step"] * r["nfe"] for r in sel) / nfe,
                      "nfe": nfe / len(sel), "tps": tokens / wall}
        base = per.get(baseline)
        for m, row in per.items():
            row["speedup"] = row["tps"] / base["tps"] if base else float("nan")
            table.append(row)
    return table


def markdown(table: list[dict[str, Any]], stamp: dict[str, Any]) -> str:
    head = "| suite | method | n | accuracy | TPF | tokens/step | NFE | TPS | speed-up |\n|---|---|---|---|---|---|---|---|---|"
    lines = [f"| {r['suite']} | {r['method']} | {r['n']} | {100 * r['accuracy']:.1f}% | {r['tpf']:.2f} | "
             f"{r['tokens_per_step']:.2f} | {r['nfe']:.1f} | {r['tps']:.1f} | {r['speedup']:.2f}× |" for r in table]
    foot = (f"\nMachine: {stamp['device']} ({stamp['machine']}), torch {stamp['torch']}, git {stamp['git_sha']}, "
            f"{stamp['timestamp']}. TPF = non-EOS tokens / NFE; TPS = non-EOS tokens / decode wall time.")
    return "\n".join([head, *lines]) + "\n" + foot + "\n"


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
