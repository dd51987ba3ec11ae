"""Per-step cost of Polestar against Fast-dLLM on a random-weight model of LLaDA-8B-Instruct's shape (bf16), where
tokens per forward do not matter but the cost of each step does (issue: kernels, paper Fig 12).

    python -m analysis.step_cost                        # CUDA, LLaDA-8B shape, generation 256 and 512
    python -m analysis.step_cost --device cpu --small   # smoke run: the embedded model's shape, random weights

Random weights give near-uniform confidences, so both methods commit about one token per step and run the same
number of steps per block; the step times (from the decode trace, CUDA-synchronised) are then comparable. Polestar
runs in four system settings (`SYSTEM`): its defaults (on CUDA the window offloaded to host memory, the refresh rows
picked on the host: one wait for the device per refreshed layer), the window kept on the device with the same host
selection, the window on the device with device-side selection (no wait between layers: docs/algorithm.md §4), and
that last one with each layer's side work (proxy attention, drift, pick, packet) on the main stream instead of a side
stream beside the block's attention and MLP (`overlap="off"`: what the side stream buys).
Prints one JSON line per (method, generation length): mean ms per step by pass kind, mean ms per step overall, its
ratio to Fast-dLLM's, and peak device memory when on CUDA.
"""

from __future__ import annotations

import argparse
import json
import statistics


LLADA_8B = {"d_model": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 32, "mlp_hidden": 12288,
            "vocab_size": 126464}
EMBEDDED = {"d_model": 256, "n_layers": 8, "n_heads": 8, "n_kv_heads": 8, "mlp_hidden": 768, "vocab_size": 1024}
# the measured configurations: (name, preset, system overrides)
SYSTEM = (("fast-dllm", "fast-dllm", {}), ("polestar", "polestar", {}),
          ("polestar, window on device", "polestar", {"offload": "off", "device_select": "off"}),
          ("polestar, device selection", "polestar", {"offload": "off", "device_select": "on"}),
          ("polestar, device selection, no side stream", "polestar",
           {"offload": "off", "device_select": "on", "overlap": "off"}))


def random_model(shape: dict, device, dtype):
    import torch

    from polestar.models.spec import ModelSpec
    from polestar.models.transformer import Transformer

    spec = ModelSpec(family="llada", max_seq_len=4096, rms_eps=1e-5, rope_theta=500000.0, qkv_bias=False,
                     tie_embeddings=False, logit_shift=0, rope_in_fp32=True, mask_id=shape["vocab_size"] - 2,
                     eos_id=shape["vocab_size"] - 3, pad_id=shape["vocab_size"] - 3, bos_id=None,
                     torch_dtype="bfloat16", **shape)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Transformer(spec)
    finally:
        torch.set_default_dtype(previous)
    generator = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=generator)
    return model.eval()


def main(argv: list[str] | None = None) -> None:
    import torch

    from polestar.config import resolve
    from polestar.decode import decode

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true", help="the embedded model's shape (CPU smoke run)")
    parser.add_argument("--prompt-length", type=int, default=300)
    parser.add_argument("--gen-lengths", type=int, nargs="+", default=None)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    shape = EMBEDDED if args.small else LLADA_8B
    gen_lengths = args.gen_lengths or ([64] if args.small else [256, 512])
    model = random_model(shape, device, torch.float32 if device.type == "cpu" else torch.bfloat16)
    prompt = torch.randint(10, shape["vocab_size"] - 10, (1, args.prompt_length if not args.small else 40),
                           generator=torch.Generator().manual_seed(1)).to(device)
    for gen_length in gen_lengths:
        per_method = {}
        for method, preset, system in SYSTEM + SYSTEM:  # the second round is the measured one
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            cfg = resolve(preset, gen_length=gen_length, block_length=32, **system)
            result = decode(model, prompt, cfg, trace=True)
            kinds: dict[str, list[float]] = {}
            for event in result.trace.events:
                kinds.setdefault(event.kind, []).append(event.ms)
            per_method[method] = {
                "method": method, "gen_length": gen_length, "steps": len(result.trace.events), "nfe": result.nfe,
                "ms_per_step": round(statistics.fmean(e.ms for e in result.trace.events), 3),
                "ms_by_pass": {kind: round(statistics.fmean(v), 3) for kind, v in kinds.items()},
                "steps_by_pass": {kind: len(v) for kind, v in kinds.items()},
                "peak_mem_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
                if device.type == "cuda" else None,
            }
        fast = per_method["fast-dllm"]["ms_per_step"]
        for row in per_method.values():
            print(json.dumps(row | {"over_fastdllm_ms_per_step": round(row["ms_per_step"] / fast, 3)}), flush=True)


if __name__ == "__main__":
    main()
