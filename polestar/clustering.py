"""Polestar's drift bookkeeping in torch: spherical k-means, proxy attention, KL drift (docs/algorithm.md §2–3).

Shapes: hidden states [n, d]; centroids [K, d]; attention distributions [K or n, heads, length].
The Triton kernels of `kernels/` replace these on a GPU and are tested against them.
"""

from __future__ import annotations

import torch

from kernels.token_kl import token_drift_kl_reference


def split_counts(k: int, n_prefix: int, n_suffix: int) -> tuple[int, int]:
    """K split between prefix and suffix in proportion to their lengths (docs/algorithm.md §2, the public code's
    rule)."""
    if n_prefix == 0:
        return 0, (k if n_suffix else 0)
    if n_suffix == 0:  # the last block: K_pre keeps its cap of K − 1 (spec and public code: 7 + 0 of 8)
        return (k - 1 if k > 1 else k), 0
    k_pre = min(k - 1, max(1, (k * n_prefix) // (n_prefix + n_suffix)))
    return k_pre, k - k_pre


def spherical_kmeans(x: torch.Tensor, k: int, iters: int, first: torch.Tensor):
    """Independent spherical k-means of each of B sets x [B, n, d] (Polestar clusters every layer's window at
    once), in fp32. Assign by cosine similarity to L2-normalised centroids; centroid = mean of its (raw) members.
    Initialisation: member `first[b]`, then farthest-point seeding (the member least similar to every chosen
    seed), which avoids two seeds in one cluster; an emptied cluster keeps its centroid.
    Returns labels [B, n], centroids [B, k', d] and counts [B, k'] of the last assignment, k' = min(k, n);
    `iters` ≥ 1 (`DecodeConfig.polestar_kmeans_iters`)."""
    x = x.float()
    batch, n, _ = x.shape
    k = min(k, n)
    sets = torch.arange(batch, device=x.device)
    unit = torch.nn.functional.normalize(x, dim=-1)
    seeds = [first]
    closest = (unit @ unit[sets, first].unsqueeze(-1)).squeeze(-1)  # [B, n]: similarity to the nearest seed
    for _ in range(1, k):
        seeds.append(closest.argmin(dim=-1))
        closest = torch.maximum(closest, (unit @ unit[sets, seeds[-1]].unsqueeze(-1)).squeeze(-1))
    centroids = x[sets.unsqueeze(-1), torch.stack(seeds, dim=-1)]  # [B, k, d]
    offsets = (sets * k).unsqueeze(-1)  # labels of set b index rows b·k … b·k + k − 1 of the flattened centroids
    for _ in range(iters):
        labels = (unit @ torch.nn.functional.normalize(centroids, dim=-1).transpose(1, 2)).argmax(dim=-1)
        flat = (labels + offsets).flatten()
        sums = torch.zeros(batch * k, x.shape[-1], device=x.device).index_add_(0, flat, x.reshape(-1, x.shape[-1]))
        counts = torch.bincount(flat, minlength=batch * k).view(batch, k)
        filled = counts > 0
        centroids = torch.where(filled.unsqueeze(-1), sums.view(batch, k, -1) / counts.clamp_min(1).unsqueeze(-1),
                                centroids)
    return labels, centroids, counts


def kl_drift(now: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """mean over heads of max(0, KL(now ‖ ref)), fp32, probabilities clamped at 1e-12.
    now, ref [..., heads, length] -> [...] (the token-drift kernel's reference, in fp32)."""
    return token_drift_kl_reference(now.float(), ref.float())


def proxy_drift(model, layer: int, centroids: torch.Tensor, cache, reference: torch.Tensor | None,
                impl: str = "torch") -> tuple[torch.Tensor, torch.Tensor | None]:
    """Content-only attention of centroid queries over layer `layer`'s keys (rotated back to content only) and
    each centroid's KL drift against `reference`, in one fused pass (`kernels.proxy_kl`; `impl` picks the Triton
    kernel or its torch reference). Returns (probs [K, heads, length] fp32, drift [K] fp32). With no reference
    (block entry) there is no drift: the torch path computes the probabilities alone and returns drift None; the
    Triton kernel, which always compares, gets the uniform distribution and its drift is dropped."""
    from kernels.nvfp4 import resolve_impl
    from kernels.proxy_kl import proxy_attention_kl, proxy_attention_reference

    q = model.project_q(layer, centroids.to(model.dtype).unsqueeze(0))[0].transpose(0, 1)  # [K, H, hd]
    k, _ = cache.layer(layer)
    k = model.rope.apply(k, cache.positions, inverse=True)[0]
    padding = None if cache.key_padding is None else cache.key_padding[0]
    scale = model.spec.head_dim ** -0.5
    if reference is None:
        if resolve_impl(impl, q.device) == "torch":
            return proxy_attention_reference(q, k, scale, padding).float(), None
        uniform = torch.full((q.shape[0], q.shape[1], cache.length), 1.0 / max(1, cache.length), device=q.device)
        return proxy_attention_kl(q, k, uniform, scale, padding, impl)[0], None
    return proxy_attention_kl(q, k, reference, scale, padding, impl)
