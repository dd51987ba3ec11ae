"""KV staleness against a full recompute (docs/algorithm.md §5, paper §C.2):
E_i(t, ℓ) = 1 − ½(cos(K, K_ref) + cos(V, V_ref)), per head then averaged over heads, for every layer ℓ and
position i. The reference forward is extra work for analysis only: it is never counted in NFE or TPS."""

from __future__ import annotations

import torch

from polestar.models.cache import KVCache


@torch.no_grad()
def kv_staleness(model, canvas: torch.Tensor, cache: KVCache, reference: KVCache | None = None) -> torch.Tensor:
    """[n_layers, length] staleness of `cache` for the current `canvas` (batch row 0). `reference`: a cache a full
    forward over `canvas` has just filled (an analysis that runs that forward anyway); None runs it here."""
    if reference is None:
        reference = model.new_cache(canvas.shape[0], canvas.shape[1])
        model.run(canvas, cache=reference)
    cos_k = torch.nn.functional.cosine_similarity(cache.k[:, 0].float(), reference.k[:, 0].float(), dim=-1)
    cos_v = torch.nn.functional.cosine_similarity(cache.v[:, 0].float(), reference.v[:, 0].float(), dim=-1)
    return (1 - 0.5 * (cos_k + cos_v)).mean(dim=1)  # [layers, heads, length] -> [layers, length]
