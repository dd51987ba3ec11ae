"""Proxy attention + per-cluster KL drift in one pass (Polestar-Cache's per-step drift signal, docs/algorithm.md §3).

For each cluster c and head h: p = softmax(q[c, h] · k[h // group]ᵀ · scale) over the layer's keys (padded keys
excluded), written out as the new proxy distribution, and KL(p ‖ ref[c, h]) with both sides clamped at 1e-12,
accumulated in the same sweep over the keys. drift[c] = mean over heads of max(0, KL).

Layouts: `q` [K, H, D] content-only centroid queries (any float dtype); `k` [H_kv, L, D] content-only keys
(H a multiple of H_kv: MHA or GQA); `ref` [K, H, L] fp32 reference distributions; `key_padding` [L] bool
(True = ignore) or None. Outputs: probs [K, H, L] fp32 and drift [K] fp32. Any D, L, K ≥ 0; all inputs are
converted to fp32 right after loading (the interpreter's bf16 arithmetic is wrong). Grid (K, H / BLOCK_H): one
program per cluster and group of BLOCK_H heads (1 on a GPU, for registers; all heads in the interpreter, where
each program costs milliseconds of Python) sweeps the keys twice in tiles of BLOCK_L (online max/normaliser, then
probabilities + KL); the head mean (H floats per cluster) is a torch op on the [K, H] result, which keeps the sum
order deterministic.
Hardware: any CUDA GPU with Triton 3.x, or the CPU interpreter (TRITON_INTERPRET=1 before import).

Public entry: `proxy_attention_kl(q, k, ref, scale, key_padding=None, impl="auto")`;
`proxy_attention_kl_reference` is the torch version, `proxy_attention_reference` its first half (probs only).
"""

from __future__ import annotations

import torch

from kernels.nvfp4 import cdiv, next_pow2, program_block, resolve_impl

PROB_FLOOR = 1e-12


def _check(q: torch.Tensor, k: torch.Tensor, ref: torch.Tensor, key_padding: torch.Tensor | None) -> None:
    if q.dim() != 3 or k.dim() != 3 or ref.dim() != 3:
        raise ValueError(f"q [K, H, D], k [H_kv, L, D], ref [K, H, L] expected, got {list(q.shape)}, "
                         f"{list(k.shape)}, {list(ref.shape)}")
    n_clusters, heads, dim = q.shape
    kv_heads, length, k_dim = k.shape
    if k_dim != dim or kv_heads == 0 or heads % kv_heads:
        raise ValueError(f"q heads/dim {heads}/{dim} do not fit k heads/dim {kv_heads}/{k_dim}")
    if tuple(ref.shape) != (n_clusters, heads, length):
        raise ValueError(f"ref must be [{n_clusters}, {heads}, {length}], got {list(ref.shape)}")
    if key_padding is not None and tuple(key_padding.shape) != (length,):
        raise ValueError(f"key_padding must be [{length}], got {list(key_padding.shape)}")


def kl_clamped(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL(p ‖ q) over the last axis with both clamped at PROB_FLOOR (no head mean): [..., L] -> [...]."""
    p, q = p.clamp_min(PROB_FLOOR), q.clamp_min(PROB_FLOOR)
    return (p * (p.log() - q.log())).sum(-1)


def proxy_attention_reference(q: torch.Tensor, k: torch.Tensor, scale: float,
                              key_padding: torch.Tensor | None = None) -> torch.Tensor:
    """The proxy distributions alone, probs [K, H, L] (fp32, or fp64 for fp64 inputs): what a block entry keeps as
    the drift reference, with nothing yet to compare it against."""
    acc = torch.promote_types(q.dtype, torch.float32)
    keys = k.to(acc).repeat_interleave(q.shape[1] // k.shape[0], dim=0)  # [H, L, D]
    scores = torch.einsum("chd,hld->chl", q.to(acc), keys) * scale
    if key_padding is not None:
        scores = scores.masked_fill(key_padding, float("-inf"))
    return scores.softmax(-1)


def proxy_attention_kl_reference(q: torch.Tensor, k: torch.Tensor, ref: torch.Tensor, scale: float,
                                 key_padding: torch.Tensor | None = None):
    """Readable torch version; computes in fp32, or in fp64 when given fp64 inputs (the tests' oracle)."""
    _check(q, k, ref, key_padding)
    probs = proxy_attention_reference(q, k, scale, key_padding)
    drift = kl_clamped(probs, ref.to(probs.dtype)).clamp_min(0).mean(-1)
    return probs, drift


def proxy_attention_kl(q: torch.Tensor, k: torch.Tensor, ref: torch.Tensor, scale: float,
                       key_padding: torch.Tensor | None = None, impl: str = "auto"):
    """(probs [K, H, L] fp32, drift [K] fp32): see the module docstring."""
    if resolve_impl(impl, q.device) == "torch":
        probs, drift = proxy_attention_kl_reference(q, k, ref, scale, key_padding)
        return probs.float(), drift.float()
    _check(q, k, ref, key_padding)
    n_clusters, heads, dim = q.shape
    length = k.shape[1]
    probs = torch.zeros(n_clusters, heads, length, dtype=torch.float32, device=q.device)
    kl = torch.zeros(n_clusters, heads, dtype=torch.float32, device=q.device)
    if n_clusters and length:
        from kernels._proxy_kl_triton import _proxy_kl_kernel

        valid = (torch.ones(length, dtype=torch.int8, device=q.device) if key_padding is None
                 else (~key_padding).to(torch.int8))
        block_h = 1 if q.device.type == "cuda" else next_pow2(heads)
        # key tiles of 64 on a GPU: register pressure with D up to 128
        _proxy_kl_kernel[(n_clusters, cdiv(heads, block_h))](
            q.contiguous(), k.contiguous(), ref.float().contiguous(), valid, probs, kl, float(scale), length, dim,
            heads, heads // k.shape[0], PROB_FLOOR, BLOCK_H=block_h, BLOCK_L=program_block(length, q.device, 64),
            BLOCK_D=max(16, next_pow2(dim)))
    return probs, kl.clamp_min(0).mean(-1)
