"""Token-drift KL: for each of the block's query rows, the KL divergence between its final-layer attention
distribution now and at the previous forward, per head, clamped at zero and averaged over heads (Polestar-Commit's
δ, docs/algorithm.md §3).

Layouts: `now`, `ref` [N, H, L] (fp32, fp16 or bf16; any strides with the last axis contiguous, so the model's
[1, H, N, L] attention can be passed as `attn[0].transpose(0, 1)` without a copy). Output [N] fp32.
Probabilities are clamped at 1e-12 before the logarithm, as in the reference. Grid (N,): one program per row
holds all its heads (BLOCK_H ≥ H; a [BLOCK_H, BLOCK_L] tile is small even for 32 heads) and sweeps L in tiles of
BLOCK_L; the head mean is a torch op on the [N, H] result (deterministic order).
Hardware: any CUDA GPU with Triton 3.x, or the CPU interpreter (TRITON_INTERPRET=1 before import).

Public entry: `token_drift_kl(now, ref, impl="auto")`; `token_drift_kl_reference` is the torch version.
"""

from __future__ import annotations

import torch

from kernels.nvfp4 import next_pow2, program_block, resolve_impl
from kernels.proxy_kl import PROB_FLOOR, kl_clamped


def token_drift_kl_reference(now: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    acc = torch.promote_types(now.dtype, torch.float32)
    return kl_clamped(now.to(acc), ref.to(acc)).clamp_min(0).mean(-1)


def token_drift_kl(now: torch.Tensor, ref: torch.Tensor, impl: str = "auto") -> torch.Tensor:
    """[N, H, L] × [N, H, L] -> [N] fp32: mean over heads of max(0, KL(now ‖ ref))."""
    if now.dim() != 3 or now.shape != ref.shape:
        raise ValueError(f"now and ref must both be [N, H, L], got {list(now.shape)} and {list(ref.shape)}")
    if resolve_impl(impl, now.device) == "torch":
        return token_drift_kl_reference(now, ref).float()
    rows, heads, length = now.shape
    now = now if now.stride(-1) == 1 else now.contiguous()
    ref = ref if ref.stride(-1) == 1 else ref.contiguous()
    kl = torch.zeros(rows, heads, dtype=torch.float32, device=now.device)
    if rows and heads and length:
        from kernels._token_kl_triton import _token_kl_kernel

        _token_kl_kernel[(rows,)](
            now, ref, kl, now.stride(0), now.stride(1), ref.stride(0), ref.stride(1), length, heads, PROB_FLOOR,
            BLOCK_H=next_pow2(heads), BLOCK_L=program_block(length, now.device, 64))
    return kl.clamp_min(0).mean(-1)
