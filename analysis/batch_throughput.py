"""Batch 1 against batch B in one run: the same held-out prompts decoded one at a time and B at a time, with
every batch-B row checked against its batch-1 decode token for token. Prints one JSON line per method and
writes them as a CSV with `--out`.

    python -m analysis.batch_throughput --suite arith --n 16 --batch 4 --methods fast-dllm,parallel

Throughput is generated content tokens over wall time for the whole set. The two passes alternate per chunk of
B prompts (batch 1 over the chunk, then the chunk as one batch), so machine noise hits both alike; compare the
two only as their ratio. A batch steps through each block until its slowest row has finished the block, so
rows with short answers wait: the ratio depends on how alike the answers in a batch are.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path


def measure(model, prompts: list, cfg, batch: int) -> dict:
    import torch

    from polestar.decode import decode, decode_batch

    one_s = many_s = 0.0
    tokens = nfe_one = forwards_many = 0
    same = 0
    for first in range(0, len(prompts), batch):
        chunk = prompts[first:first + batch]
        start = time.perf_counter()
        alone = [decode(model, p.unsqueeze(0), cfg) for p in chunk]
        one_s += time.perf_counter() - start
        start = time.perf_counter()
        together = decode_batch(model, chunk, cfg)
        many_s += time.perf_counter() - start
        same += sum(torch.equal(a.canvas, b.canvas) and a.nfe == b.nfe for a, b in zip(alone, together))
        tokens += sum(a.content_tokens for a in alone)
        nfe_one += sum(a.nfe for a in alone)
        forwards_many += together[0].batch_nfe
    return {"n": len(prompts), "batch": batch, "rows_equal": same, "content_tokens": tokens,
            "forwards_batch1": nfe_one, "forwards_batched": forwards_many,
            "tps_batch1": round(tokens / one_s, 2), "tps_batched": round(tokens / many_s, 2),
            "speedup": round(one_s / many_s, 3), "wall_s_batch1": round(one_s, 2), "wall_s_batched": round(many_s, 2)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="checkpoint directory (default: the embedded model)")
    p.add_argument("--suite", default="arith", help="task suite (polestar.tasks)")
    p.add_argument("--n", type=int, default=16, help="held-out examples")
    p.add_argument("--batch", type=int, default=4, help="rows per batch")
    p.add_argument("--methods", default="fast-dllm,parallel", help="comma-separated batchable presets")
    p.add_argument("--gen-length", type=int, default=256)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--out", type=Path, default=None, help="CSV of the rows")
    args = p.parse_args(argv)

    from polestar.threads import quiet_openmp

    quiet_openmp()
    import torch

    import polestar
    from polestar import tasks
    from polestar.api import encode_prompt
    from polestar.config import resolve

    if args.threads:
        torch.set_num_threads(args.threads)
    model = polestar.load_model(args.model or polestar.DEFAULT_MODEL)
    prompts = [encode_prompt(model, ex.prompt)[0] for ex in tasks.make(args.suite, args.n, 0)]
    rows = []
    for method in args.methods.split(","):
        cfg = resolve(method, gen_length=args.gen_length)
        measure(model, prompts[:1], cfg, 1)  # warm-up
        row = {"suite": args.suite, "method": method, "gen_length": args.gen_length,
               "threads": torch.get_num_threads(), **measure(model, prompts, cfg, args.batch)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
