"""GPU benchmark of the kernels: parity on the device, then time and achieved bandwidth at LLaDA-8B shapes.

    python -m kernels.bench                 # on a CUDA machine: parity + timings, one JSON line per result
    python -m kernels.bench --step-cost     # also per-step time of Polestar vs Fast-dLLM (analysis/step_cost.py)
    TRITON_INTERPRET=1 python -m kernels.bench --device cpu --small    # smoke run of the same code (CI)

Bandwidth is bytes read + written by the kernel over its time, compared with a device-to-device copy measured
in the same run (the practical peak), so no hardware number is hard-coded. Parity: the 4-bit kernels must equal
their torch references bit for bit on the device (there the reference's fp8 casts round correctly); the fused
attention/KL kernels must satisfy the tests' rule (error ≤ 2× the fp32 torch error against fp64, + 4 ulps).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

EPS32 = torch.finfo(torch.float32).eps


def _timer(device: torch.device, fn, repeat: int) -> float:
    """Median seconds of `fn()` over `repeat` runs after one warm-up (CUDA events on a GPU)."""
    fn()
    times = []
    for _ in range(repeat):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def _close(got, oracle, eager) -> tuple[bool, float]:
    err = float((got.double() - oracle).abs().max()) if got.numel() else 0.0
    eager_err = float((eager.double() - oracle).abs().max()) if got.numel() else 0.0
    limit = 2 * eager_err + 4 * EPS32 * float(oracle.abs().max()) if got.numel() else 0.0
    return err <= limit, (err / eager_err if eager_err else 0.0)


def run(device: torch.device, small: bool, repeat: int) -> list[dict]:
    from kernels.gather_dequant import gather_dequantize, gather_dequantize_reference
    from kernels.mxfp4 import mxfp4_dequantize, mxfp4_dequantize_reference, mxfp4_quantize, mxfp4_quantize_reference
    from kernels.nvfp4 import nvfp4_dequantize, nvfp4_dequantize_reference, nvfp4_quantize, nvfp4_quantize_reference
    from kernels.proxy_kl import proxy_attention_kl, proxy_attention_kl_reference
    from kernels.token_kl import token_drift_kl, token_drift_kl_reference

    g = torch.Generator(device="cpu").manual_seed(0)
    # LLaDA-8B: d 4096, 32 heads of 128; a 512-token generation with a ~300-token prompt; window of 3 blocks of 32
    rows, channels = (96, 256) if small else (32 * 96, 4096)  # all layers' window rows at once
    heads, kv_heads, length, dim, clusters = (4, 2, 100, 32, 8) if small else (32, 32, 832, 128, 32)
    out = []

    def record(name, ok, seconds, nbytes, **extra):
        row = {"kernel": name, "parity": ok, "ms": round(seconds * 1e3, 4),
               "GB/s": round(nbytes / seconds / 1e9, 1) if seconds > 0 else None, **extra}
        out.append(row)
        print(json.dumps(row), flush=True)

    big = torch.empty(256 * 2**20 if not small else 2**20, dtype=torch.uint8, device=device)
    copy_s = _timer(device, lambda: big.clone(), repeat)
    record("device copy (peak reference)", True, copy_s, 2 * big.numel())
    peak = 2 * big.numel() / copy_s

    x = torch.randn(rows, channels, generator=g).to(device=device, dtype=torch.bfloat16)
    codes, scales, s = nvfp4_quantize(x, impl="triton")
    rc, rs, _ = nvfp4_quantize_reference(x)
    q_bytes = x.numel() * 2 + codes.numel() + scales.numel()
    ok = torch.equal(codes, rc) and torch.equal(scales, rs)
    t = _timer(device, lambda: nvfp4_quantize(x, s, impl="triton"), repeat)
    record("nvfp4 quantize (bf16 in)", ok, t, q_bytes, of_peak=round(q_bytes / t / peak, 3))
    deq = nvfp4_dequantize(codes, scales, s, impl="triton")
    ok = torch.equal(deq, nvfp4_dequantize_reference(codes, scales, s))
    d_bytes = codes.numel() + scales.numel() + deq.numel() * 4
    t = _timer(device, lambda: nvfp4_dequantize(codes, scales, s, impl="triton"), repeat)
    record("nvfp4 dequantize (fp32 out)", ok, t, d_bytes, of_peak=round(d_bytes / t / peak, 3))

    mc, ms = mxfp4_quantize(x, impl="triton")
    rmc, rms = mxfp4_quantize_reference(x)
    ok = torch.equal(mc, rmc) and torch.equal(ms, rms)
    t = _timer(device, lambda: mxfp4_quantize(x, impl="triton"), repeat)
    mq_bytes = x.numel() * 2 + mc.numel() + ms.numel()
    record("mxfp4 quantize (bf16 in)", ok, t, mq_bytes, of_peak=round(mq_bytes / t / peak, 3))
    ok = torch.equal(mxfp4_dequantize(mc, ms, impl="triton"), mxfp4_dequantize_reference(mc, ms))
    t = _timer(device, lambda: mxfp4_dequantize(mc, ms, impl="triton"), repeat)
    md_bytes = mc.numel() + ms.numel() + x.numel() * 4
    record("mxfp4 dequantize (fp32 out)", ok, t, md_bytes, of_peak=round(md_bytes / t / peak, 3))

    anchors = torch.randn(clusters, channels, generator=g).to(device)
    anchor_index = torch.randint(0, clusters, (rows,), generator=g).to(device)
    picked = torch.randperm(rows, generator=g)[: rows // 4].to(device)  # top-k clusters ≈ a quarter of the window
    got = gather_dequantize(codes, scales, s, anchors, anchor_index, picked, impl="triton")
    ok = torch.equal(got, gather_dequantize_reference(codes, scales, s, anchors, anchor_index, picked))
    t = _timer(device, lambda: gather_dequantize(codes, scales, s, anchors, anchor_index, picked, impl="triton"),
               repeat)
    g_bytes = len(picked) * (channels // 2 + channels // 16 + 2 * channels * 4)
    record("gather + nvfp4 dequantize + anchor", ok, t, g_bytes, of_peak=round(g_bytes / t / peak, 3))

    q = torch.randn(clusters, heads, dim, generator=g).to(device=device, dtype=torch.bfloat16)
    k = torch.randn(kv_heads, length, dim, generator=g).to(device=device, dtype=torch.bfloat16)
    ref = torch.randn(clusters, heads, length, generator=g).softmax(-1).to(device)
    scale = dim ** -0.5
    probs, drift = proxy_attention_kl(q, k, ref, scale, impl="triton")
    oracle_p, oracle_d = proxy_attention_kl_reference(q.double(), k.double(), ref.double(), scale)
    eager_p, eager_d = proxy_attention_kl_reference(q, k, ref, scale)
    ok_p, ratio_p = _close(probs, oracle_p, eager_p)
    ok_d, ratio_d = _close(drift, oracle_d, eager_d)
    t = _timer(device, lambda: proxy_attention_kl(q, k, ref, scale, impl="triton"), repeat)
    t_ref = _timer(device, lambda: proxy_attention_kl_reference(q, k, ref, scale), repeat)
    p_bytes = k.numel() * 2 + 2 * ref.numel() * 4  # keys, reference read, probabilities written
    record("proxy attention + cluster KL (one layer)", ok_p and ok_d, t, p_bytes, error_ratio=[ratio_p, ratio_d],
           torch_ms=round(t_ref * 1e3, 4), paper_target_ms=0.10)

    rows_b = 32
    now = torch.randn(rows_b, heads, length, generator=g).softmax(-1).to(device)
    before = torch.randn(rows_b, heads, length, generator=g).softmax(-1).to(device)
    got = token_drift_kl(now, before, impl="triton")
    ok, ratio = _close(got, token_drift_kl_reference(now.double(), before.double()),
                       token_drift_kl_reference(now, before))
    t = _timer(device, lambda: token_drift_kl(now, before, impl="triton"), repeat)
    t_ref = _timer(device, lambda: token_drift_kl_reference(now, before), repeat)
    record("token-drift KL (block rows, final layer)", ok, t, 2 * now.numel() * 4, error_ratio=ratio,
           torch_ms=round(t_ref * 1e3, 4))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (needs TRITON_INTERPRET=1)")
    parser.add_argument("--small", action="store_true", help="small shapes (for the interpreter smoke run)")
    parser.add_argument("--repeat", type=int, default=20, help="timed repetitions per kernel (median)")
    parser.add_argument("--step-cost", action="store_true",
                        help="then run analysis/step_cost.py (Polestar vs Fast-dLLM per-step time, same device)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("kernels.bench: no CUDA device here. Run it on a GPU machine, or smoke-test the code with "
              "TRITON_INTERPRET=1 python -m kernels.bench --device cpu --small", file=sys.stderr)
        return 2
    results = run(device, args.small, args.repeat)
    failed = [r["kernel"] for r in results if not r["parity"]]
    if failed:
        print(f"parity FAILED on {device}: {', '.join(failed)}", file=sys.stderr)
    if args.step_cost:
        script = Path(__file__).resolve().parent.parent / "analysis" / "step_cost.py"
        cmd = [sys.executable, str(script), "--device", args.device] + (["--small"] if args.small else [])
        subprocess.run(cmd, check=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
