"""Canvas-for-canvas check that a refactor leaves decoding unchanged: decode N held-out examples per task with
every preset, save the final canvases and NFEs, and compare two such files.

    python -m analysis.canvas_check record before.safetensors --n 10     # before the change
    python -m analysis.canvas_check record after.safetensors --n 10      # after it
    python -m analysis.canvas_check compare before.safetensors after.safetensors
    python -m analysis.canvas_check compare before.safetensors after.safetensors --common   # recorded with other n
"""

from __future__ import annotations

import argparse
import sys


def record(path: str, n: int, model_path: str, threads: int) -> None:
    import torch
    from safetensors.torch import save_file

    import polestar
    from polestar import tasks
    from polestar.api import encode_prompt
    from polestar.config import PRESETS, resolve
    from polestar.decode import decode

    if threads:
        torch.set_num_threads(threads)
    model = polestar.load_model(model_path)
    tensors = {}
    for task in ("arith", "lists"):
        for i, ex in enumerate(tasks.make(task, n, seed=0)):
            ids = encode_prompt(model, ex.prompt)
            for method in PRESETS:
                out = decode(model, ids, resolve(method))
                tensors[f"{task}/{i}/{method}/canvas"] = out.canvas[0].contiguous()
                tensors[f"{task}/{i}/{method}/nfe"] = torch.tensor([out.nfe])
        print(task, "done", flush=True)
    save_file(tensors, path)


def compare(a: str, b: str, common: bool = False) -> int:
    """0 when every decode both files hold has the same canvas and NFE. Without `common` the files must hold the
    same decodes; with it, the decodes only one holds (a larger --n, a preset only one side has) are left out."""
    import torch
    from safetensors.torch import load_file

    x, y = load_file(a), load_file(b)
    if common:
        keys = set(x) & set(y)
        x, y = {k: x[k] for k in keys}, {k: y[k] for k in keys}
    if x.keys() != y.keys():
        print("the files hold different decodes:", sorted(set(x) ^ set(y))[:5])
        return 1
    differ = sorted(k for k in x if not torch.equal(x[k], y[k]))
    decodes = len(x) // 2
    print(f"{decodes} decodes compared (canvas and NFE): {len(differ)} differ" + "".join(f"\n  {k}" for k in differ))
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    import polestar

    p = argparse.ArgumentParser(prog="python -m analysis.canvas_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("out")
    rec.add_argument("--n", type=int, default=10, help="examples per task (arith, lists)")
    rec.add_argument("--model", default=polestar.DEFAULT_MODEL)
    rec.add_argument("--threads", type=int, default=1)
    cmp = sub.add_parser("compare")
    cmp.add_argument("a")
    cmp.add_argument("b")
    cmp.add_argument("--common", action="store_true", help="compare only the decodes both files hold")
    args = p.parse_args(argv)
    if args.command == "record":
        record(args.out, args.n, args.model, args.threads)
        return 0
    return compare(args.a, args.b, args.common)


if __name__ == "__main__":
    sys.exit(main())
