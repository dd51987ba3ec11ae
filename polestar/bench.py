"""`python -m polestar bench`: accuracy, TPF and TPS of several methods on held-out task examples.

Methods are interleaved per example (every method decodes example i before any decodes example i+1), so
machine noise hits all alike; speed-ups are ratios of TPS within this one run. One warm-up decode per
method is excluded. Every CSV row carries the config, the weights' sha256, versions, git SHA, machine and
timestamp; with `--out` the CSV is appended row by row and a rerun skips the rows already there for the same
weights and config (resumable).
"""

from __future__ import annotations

import csv
import json
import math
import platform
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from polestar import tasks
from polestar.api import generate
from polestar.config import DecodeConfig, resolve
from polestar.distributed import shard
from polestar.errors import ConfigError


class BenchError(ConfigError):
    """A bench output file that cannot be resumed."""


def _cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo; elsewhere `platform.processor()`, often empty)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return platform.processor()


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
            "python": platform.python_version(), "machine": f"{platform.machine()} {_cpu_name()}".strip(),
            "device": device, "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def configs_for(methods: list[str], overrides: dict[str, Any]) -> dict[str, DecodeConfig]:
    """Preset names -> configs with the same overrides applied to each."""
    return {m: resolve(m, **overrides) for m in methods}


def run_bench(model, suites: list[str], n: int, configs: dict[str, DecodeConfig], seed: int,
              progress: bool = True, out: Path | None = None, decode: bool = True) -> list[dict[str, Any]] | None:
    """Decode every example with every labelled config. With `out`, rows are appended to that CSV as they
    finish and (suite, example, label, config) rows of the same weights already in it are skipped: an interrupted
    bench resumes, and a bench of other weights never mixes with them. `decode=False` decodes nothing and returns
    the rows `out` already holds (the table of a partial bench).

    Under a launcher (`accelerate launch --num_processes N -m polestar bench ...`) each process decodes every N-th
    of the decodes left to do and rank 0 gathers the rows, writes them (in the order one process would) and
    returns them; the other ranks return None. Rows do not depend on N: each decode is the same batch-1 decode."""
    if not decode and out is None:
        raise BenchError("a table without decoding reads the rows of an earlier bench: pass its --out CSV")
    methods = list(configs)
    config_json = {m: json.dumps(asdict(c), default=str) for m, c in configs.items()}
    weights = weights_key(getattr(model, "path", ""))
    rows = []
    if out is not None and out.is_file():
        _check_resumable(out)
        rows = read_csv(out, weights)
    done = {(r["suite"], int(r["example"]), r["method"], r["config"]) for r in rows}
    stamp = provenance() | {"model": weights, "dtype": str(next(model.parameters()).dtype).removeprefix("torch.")}
    work = [(suite, i, ex) for suite in suites for i, ex in enumerate(tasks.make(suite, n, seed))]
    todo = [(s, i, ex, m) for s, i, ex in work for m in methods if (s, i, m, config_json[m]) not in done]
    if not decode:
        todo = []
    part = shard()
    mine = part.take(todo)
    if mine:
        for m in dict.fromkeys(m for *_, m in mine):  # warm-up, excluded
            generate(model, "Copy the list: 1 2 3 4", configs[m])
    bar = _progress(len(mine), progress and part.rank == 0)
    new = []
    for suite, i, ex, m in mine:
        r = generate(model, ex.prompt, configs[m])
        row = {"suite": suite, "example": i, "method": m, "correct": tasks.score(suite, ex, r.text),
               "nfe": r.nfe, "content_tokens": round(r.tpf * r.nfe), "tokens_per_step": r.tokens_per_step,
               "wall_s": r.wall_s, **r.counters.as_dict(), "config": config_json[m], **stamp}
        new.append(row)
        if out is not None and part.world == 1:
            append_csv(row, out)
        bar.update(1)
    bar.close()
    if part.world > 1:
        gathered = part.gather(new)
        if gathered is None:
            return None
        order = {(s, i, m): k for k, (s, i, _, m) in enumerate(todo)}
        new = sorted((row for rows_of in gathered for row in rows_of),
                     key=lambda r: order[(r["suite"], r["example"], r["method"])])
        if out is not None:
            for row in new:
                append_csv(row, out)
    rows += new
    wanted = {(s, i, m, config_json[m]) for s, i, _ in work for m in methods}
    rows = [r for r in rows if (r["suite"], int(r["example"]), r["method"], r["config"]) in wanted]
    if not rows and not decode:
        raise BenchError(f"{out} holds no rows of these weights, suites and configs: run the bench without "
                         "--table-only first")
    return rows


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, disable=not enabled, file=sys.stderr, desc="bench", unit="decode")


def summarise(rows: list[dict[str, Any]], baseline: str = "baseline",
              methods: list[str] | None = None) -> list[dict[str, Any]]:
    """Per suite × method: accuracy, TPF, tokens/step, TPS and speed-up over `baseline` (same run). Methods come in
    the order of `methods` when given (a resumed CSV holds them in the order they were run), else as they appear."""
    table = []
    present = dict.fromkeys(r["method"] for r in rows)
    order = [m for m in methods if m in present] if methods else list(present)
    for suite in dict.fromkeys(r["suite"] for r in rows):
        per = {}
        for m in order:
            sel = [r for r in rows if r["suite"] == suite and r["method"] == m]
            tokens, nfe, wall = (sum(r[k] for r in sel) for k in ("content_tokens", "nfe", "wall_s"))
            per[m] = {"suite": suite, "method": m, "n": len(sel),
                      "accuracy": sum(r["correct"] for r in sel) / len(sel), "tpf": tokens / nfe,
                      "tokens_per_step": sum(r["tokens_per_step"] * r["nfe"] for r in sel) / nfe,
                      "nfe": nfe / len(sel), "tps": tokens / wall,
                      **{key: sum(r[key] for r in sel) / len(sel) for key in COUNTERS},
                      # the share of examples where the drift rule / a non-EOS suffix commit fired at least once
                      "with_drift": sum(r["drift_commits"] > 0 for r in sel) / len(sel),
                      "with_content_suffix": sum(r["suffix_commits"] > r["suffix_eos_commits"] for r in sel) / len(sel)}
        base = per.get(baseline)
        for m, row in per.items():
            row["speedup"] = row["tps"] / base["tps"] if base else float("nan")
            table.append(row)
    return table


def _ratio(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:.2f}×"  # no baseline in the run: no speed-up to show


def origin(rows: list[dict[str, Any]]) -> str:
    """Where bench rows come from, in words: device, CPU, dtype, torch, every git commit and the span of the
    timestamps (a resumed bench has several), the weights."""
    stamp = rows[0]
    shas = ", ".join(dict.fromkeys(r["git_sha"] for r in rows))
    times = sorted(r["timestamp"] for r in rows)
    when = times[0] if times[0] == times[-1] else f"{times[0]} to {times[-1]}"
    dtype = f", {stamp['dtype']}" if stamp.get("dtype") else ""
    return (f"{stamp['device']} ({stamp['machine']}){dtype}, torch {stamp['torch']}, git {shas}, {when}"
            + (f", weights sha256 {stamp['model']}…" if stamp.get("model") else ""))


def markdown(table: list[dict[str, Any]], rows: list[dict[str, Any]]) -> str:
    """The summary table and a footer naming where its rows come from: a resumed bench (several invocations on
    one CSV) lists every git commit and the span of its timestamps."""
    head = ("| suite | method | n | accuracy | TPF | tokens/step | NFE | TPS | speed-up | refresh steps "
            "| drift commits | suffix commits (EOS) | forced |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [f"| {r['suite']} | {r['method']} | {r['n']} | {100 * r['accuracy']:.1f}% | {r['tpf']:.2f} | "
             f"{r['tokens_per_step']:.2f} | {r['nfe']:.1f} | {r['tps']:.1f} | {_ratio(r['speedup'])} | "
             f"{r['refresh_steps']:.1f} | {r['drift_commits']:.1f} ({100 * r['with_drift']:.0f}% of examples) | "
             f"{r['suffix_commits']:.1f} ({r['suffix_eos_commits']:.1f}) | {r['forced_commits']:.1f} |" for r in table]
    foot = (f"\nMachine: {origin(rows)}. TPF = non-EOS tokens / NFE; TPS = non-EOS tokens / decode wall time. The "
            "counters are means per example; the drift column also gives the share of examples with at least one drift "
            "commit.")
    return "\n".join([head, *lines]) + "\n" + foot + "\n"


COUNTERS = ("refresh_steps", "drift_commits", "suffix_commits", "suffix_eos_commits", "forced_commits")
FIELDS = ("suite", "example", "method", "correct", "nfe", "content_tokens", "tokens_per_step", "wall_s", *COUNTERS,
          "config", "model", "dtype", "git_sha", "torch", "transformers", "python", "machine", "device", "timestamp")


def append_csv(row: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.is_file()
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            writer.writeheader()
        writer.writerow(row)


def weights_key(model_path: str | Path) -> str:
    """The weights' identity in a bench row: the first 16 hex digits of their sha256."""
    from polestar.models.loader import weights_fingerprint

    return weights_fingerprint(model_path)[:16]


def read_csv(path: Path, weights: str | None = None) -> list[dict[str, Any]]:
    """A bench CSV's rows, typed; with `weights` (a `weights_key`) only the rows of those weights."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["correct"] = r["correct"] == "True"
        r["nfe"], r["content_tokens"] = int(r["nfe"]), int(r["content_tokens"])
        r["tokens_per_step"], r["wall_s"] = float(r["tokens_per_step"]), float(r["wall_s"])
        for key in COUNTERS:
            r[key] = int(r[key])
        r.setdefault("model", "")  # rows of a bench older than the column
    return rows if weights is None else [r for r in rows if r["model"] == weights]


def _check_resumable(path: Path) -> None:
    with open(path, newline="") as f:
        header = next(csv.reader(f), None)
    if header is not None and tuple(header) != FIELDS:
        raise BenchError(f"{path} has the columns of an older bench ({', '.join(header)}): rows cannot be appended "
                         "to it; move it aside or pass another --out")
