"""Train several embedded-model candidates side by side on one GPU inside a fixed wall-clock budget, then
score each with the reference sampler. Made for a short GPU lease: everything it returns lands in --out.

    python -m analysis.gpu_sweep --out $OUT --train-s 400 --eval-s 100

Each candidate is an ordinary `python -m polestar.train` run. A first phase trains every candidate to the end
of its warm-up (the learning rate there does not depend on the total step count) and times its steps under
the same contention as later; the total is then set so the cosine schedule ends inside the budget, and the
runs resume. The result is exactly a run with that `--steps` from the start; the sweep log gives the command.
Per candidate the output holds NAME.tar (the exported LLaDA-format checkpoint, the training log) and
NAME.eval.jsonl (accuracy on held-out examples, generation 256, block 32). `--kernel-bench` runs the
kernels' GPU parity and timings beside the evaluation (its timings then share the GPU: parity is the point).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

# the v3 workload (fixed-width worked solutions, one token per digit): word problems and lists twice as often as
# the equation drill, one task per batch; 512 in the mix so generation 512 keeps EOS tails; half the rows of the
# tasks that mark what they compute are focus rows (the one-digit facts with nothing to copy), half of the
# others block-causal (the shipped model's last phase, assets model card)
COMMON = ["--n-layers", "8", "--split-digits", "--vocab-size", "1024", "--tasks", "arith-drill", "arith", "lists",
          "arith", "lists", "--response-lengths", "256", "256", "256", "256", "256", "256", "256", "512",
          "--focus-rows", "0.5", "--block-rows", "0.5", "--warmup", "300", "--min-lr-ratio", "0.05",
          "--log-every", "100", "--ckpt-every", "250", "--token-budget", "65536"]
# the shipped model already has the digit tokenizer: its continuations keep it (no --new-tokenizer)
CANDIDATES = {
    "continue-lr3e4": ["--init-from", "assets/models/polestar-tiny", "--lr", "3e-4"],
    "continue-lr1e3": ["--init-from", "assets/models/polestar-tiny", "--lr", "1e-3"],
    "scratch-lr1e3": ["--lr", "1e-3"],
}
WARMUP = 300


def _launch(name: str, flags: list[str], runs: Path, extra: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "polestar.train", "--out-dir", str(runs / name), *COMMON, *flags, *extra]
    (runs / name).mkdir(parents=True, exist_ok=True)
    log = open(runs / name / "train.log", "a")
    log.write(" ".join(cmd) + "\n")
    log.flush()
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


def _wait(procs: dict[str, subprocess.Popen], deadline: float) -> None:
    for name, p in procs.items():
        try:
            p.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            print(f"{name}: stopped at the deadline", flush=True)


def _seconds_per_step(run: Path) -> float:
    rows = {r["step"]: r["elapsed_s"] for r in map(json.loads, (run / "log.jsonl").read_text().splitlines())}
    return (rows[200] - rows[100]) / 100


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m analysis.gpu_sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--runs", type=Path, default=Path("runs/gpu"))
    p.add_argument("--device", default="cuda")
    p.add_argument("--workers", type=int, default=4, help="batch-building processes per candidate")
    p.add_argument("--train-s", type=float, default=400, help="seconds from start until training must end")
    p.add_argument("--eval-s", type=float, default=100, help="seconds for the evaluation after that")
    p.add_argument("--eval-n", type=int, default=64)
    p.add_argument("--only", default="", help="comma-separated candidate names (default: all)")
    p.add_argument("--kernel-bench", action="store_true",
                   help="also run `python -m kernels.bench` (GPU parity + timings) beside the evaluation")
    p.add_argument("--extra", default="", help="more flags for every run (e.g. a micro size for a CPU check)")
    args = p.parse_args(argv)
    t0 = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    args.runs.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    names = args.only.split(",") if args.only else list(CANDIDATES)
    base = ["--device", args.device, "--workers", str(args.workers), *args.extra.split()]

    procs = {n: _launch(n, CANDIDATES[n], args.runs, [*base, "--steps", "1000000", "--until", str(WARMUP)])
             for n in names}
    _wait(procs, t0 + args.train_s / 2)
    plan = {}
    for n in list(names):
        try:
            per_step = _seconds_per_step(args.runs / n)
        except (OSError, KeyError, ValueError):  # the run failed: show why, go on with the others
            print(n, "failed:", (args.runs / n / "train.log").read_text()[-3000:], flush=True)
            names.remove(n)
            continue
        left = args.train_s - (time.time() - t0) - 20  # 20 s: restart, resume, export
        plan[n] = WARMUP + max(1, int(0.95 * left / per_step))
    print(json.dumps({"after_warmup_s": round(time.time() - t0, 1), "steps": plan}), flush=True)
    procs = {n: _launch(n, CANDIDATES[n], args.runs,
                        [*base, "--steps", str(plan[n]), "--export", str(args.runs / n / "export")]) for n in names}
    _wait(procs, t0 + args.train_s + 30)

    from polestar.train.trainer import export

    for n in names:
        run = args.runs / n
        if not (run / "export" / "model.safetensors").is_file() or (run / "state.json").stat().st_mtime > (
                run / "export" / "model.safetensors").stat().st_mtime:
            export(run, run / "export")  # a run stopped at the deadline: its last checkpoint
        with tarfile.open(args.out / f"{n}.tar", "w") as tar:
            tar.add(run / "export", arcname=n)
            tar.add(run / "log.jsonl", arcname=f"{n}/train_log.jsonl")
            tar.add(run / "state.json", arcname=f"{n}/state.json")
            tar.add(run / "train.log", arcname=f"{n}/train.log")
    print(json.dumps({"trained_s": round(time.time() - t0, 1)}), flush=True)

    evals = {}
    for n in names:
        cmd = [sys.executable, "-m", "polestar.train.evaluate", "--model", str(args.runs / n / "export"), "--device",
               args.device, "--tasks", "lists,arith", "--n", str(args.eval_n), "--batch", "64"]
        evals[n] = subprocess.Popen(cmd, stdout=open(args.out / f"{n}.eval.jsonl", "w"), stderr=subprocess.DEVNULL)
    if args.kernel_bench:
        evals["kernels.bench"] = subprocess.Popen([sys.executable, "-m", "kernels.bench"],
                                                  stdout=open(args.out / "kernels_bench.jsonl", "w"),
                                                  stderr=subprocess.STDOUT)
    _wait(evals, time.time() + args.eval_s)
    for n in names:
        for line in (args.out / f"{n}.eval.jsonl").read_text().splitlines():
            row = json.loads(line)
            print(n, row["task"], row["accuracy"], row["wall_s"], flush=True)
    print(json.dumps({"total_s": round(time.time() - t0, 1)}), flush=True)


if __name__ == "__main__":
    main()
