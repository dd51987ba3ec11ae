"""Cache policies: how each step's forward is run and which K/V rows are reused, one class per method.

A cache policy owns the `KVCache` and whatever per-method state it needs, runs the model for a step
through the per-layer interface (`embed`, `layer`, `head`), and returns the logits that predict the loop's
target positions. It never commits tokens and never writes the canvas.
"""

from __future__ import annotations

from polestar.caches.base import CachePolicy, Pass
from polestar.config import CacheKind, DecodeConfig


def make_cache_policy(cfg: DecodeConfig, model) -> CachePolicy:
    return cache_policy_class(cfg)(model, cfg)


def cache_policy_class(cfg: DecodeConfig) -> type[CachePolicy]:
    from polestar.caches.d2 import D2Cache, EntropyCache
    from polestar.caches.elastic import ElasticCache
    from polestar.caches.fastdllm import DualCache, NoCache, PrefixCache
    from polestar.caches.polestar import PolestarCache

    policies = {
        CacheKind.NONE: NoCache,
        CacheKind.PREFIX: PrefixCache,
        CacheKind.DUAL: DualCache,
        CacheKind.ELASTIC: ElasticCache,
        CacheKind.D2: D2Cache,
        CacheKind.ENTROPY: EntropyCache,
        CacheKind.POLESTAR: PolestarCache,
    }
    return policies[cfg.cache]


__all__ = ["CachePolicy", "Pass", "cache_policy_class", "make_cache_policy"]
