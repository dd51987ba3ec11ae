"""python -m polestar {generate, bench}: decode a prompt, or benchmark methods on the task suite.

Every DecodeConfig field is a flag (`--gen-length`, `--tau-s`, `--cache` ...), generated from the dataclass.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path

from polestar.threads import quiet_openmp, set_decode_threads

quiet_openmp()  # before torch loads (polestar.config imports it)

from polestar.cli_args import add_config_args  # noqa: E402
from polestar.config import PRESETS, DecodeConfig  # noqa: E402
from polestar.errors import PolestarError  # noqa: E402


def _overrides(args: argparse.Namespace) -> dict:
    out = {}
    for f in dataclasses.fields(DecodeConfig):
        value = getattr(args, f.name, None)
        if value is not None:
            out[f.name] = value
    return out


def _parser() -> argparse.ArgumentParser:
    import polestar

    parser = argparse.ArgumentParser(prog="python -m polestar", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="decode one prompt")
    gen.add_argument("--model", default=polestar.DEFAULT_MODEL, help="checkpoint directory or hub id")
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--method", default="fast-dllm", choices=list(PRESETS))
    gen.add_argument("--raw", action="store_true", help="skip the chat template")
    gen.add_argument("--json", action="store_true", help="last stdout line: one JSON object")
    gen.add_argument("--trace-out", type=Path, default=None, help="save the trace as parquet (two files)")
    bench = sub.add_parser("bench", help="accuracy / TPF / TPS of methods on the task suite")
    bench.add_argument("--model", default=polestar.DEFAULT_MODEL)
    bench.add_argument("--suite", default="arith,lists", help="comma-separated task names")
    bench.add_argument("--n", type=int, default=20, help="examples per suite")
    bench.add_argument("--methods", default=",".join(PRESETS), help="comma-separated presets")
    bench.add_argument("--out", type=Path, default=None, help="per-example CSV (appended; a rerun resumes)")
    bench.add_argument("--table-out", type=Path, default=None, help="markdown table")
    bench.add_argument("--table-only", action="store_true",
                       help="decode nothing: the table of the rows already in --out (a partial bench)")
    bench.add_argument("--json", action="store_true", help="last stdout line: the summary as JSON")
    for p in (gen, bench):
        p.add_argument("--dtype", default=None, help="weights dtype (default: the checkpoint's)")
        p.add_argument("--device", default=None, help="cpu, cuda ... (default: cpu)")
        p.add_argument("--threads", type=int, default=0,
                       help="torch threads (0: one for a small model on a CPU, else torch's default; "
                            "polestar/threads.py)")
        add_config_args(p, DecodeConfig)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return _run(args)
    except PolestarError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    import polestar
    from polestar import bench

    overrides = _overrides(args)
    if args.command == "generate":
        from polestar.config import resolve

        resolve(args.method, **overrides)  # validate before loading weights
        model = polestar.load_model(args.model, dtype=args.dtype, device=args.device)
        set_decode_threads(model, args.threads)
        result = polestar.generate(model, args.prompt, args.method, raw=args.raw, trace=args.trace_out is not None,
                                   **overrides)
        if args.trace_out is not None:
            result.trace.save(args.trace_out)
        if args.json:
            print(json.dumps(result.summary()))
        else:
            print(result.text)
            print(f"NFE {result.nfe}  TPF {result.tpf:.2f}  TPS {result.tps:.1f}  wall {result.wall_s:.2f}s",
                  file=sys.stderr)
        return 0
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    suites = [s.strip() for s in args.suite.split(",") if s.strip()]
    for m in methods:
        from polestar.config import resolve

        resolve(m, **overrides)
    for s in suites:
        polestar.tasks.make(s, 0)
    from polestar.distributed import shard

    part = shard()
    device = args.device or (part.device if part.world > 1 else None)  # one model copy per process
    model = polestar.load_model(args.model, dtype=args.dtype, device=device)
    set_decode_threads(model, args.threads)
    rows = bench.run_bench(model, suites, args.n, bench.configs_for(methods, overrides),
                           args.seed if args.seed is not None else 0, out=args.out, decode=not args.table_only)
    if rows is None:  # a data-parallel rank other than 0: rank 0 reports
        return 0
    table = bench.summarise(rows, methods=methods)
    text = bench.markdown(table, rows)
    print(text)
    if args.table_out:
        args.table_out.parent.mkdir(parents=True, exist_ok=True)
        args.table_out.write_text(text)
    if args.json:
        print(json.dumps(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
