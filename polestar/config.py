"""Decoding configuration: one frozen dataclass validated in one place, and the named method presets.

Every field carries its help text, its range and its UI group in the field metadata; the CLI flags
(`polestar.cli_args`) and the app's sliders are generated from them, so the three cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from polestar.errors import ConfigError
from polestar.quant import FORMATS


class CommitRule(StrEnum):
    QUOTA = "quota"  # LLaDA low-confidence remasking: a planned number of tokens per step
    THRESHOLD = "threshold"  # Fast-dLLM: every confidence ≥ tau_s, plus the forced top-1
    FACTOR = "factor"  # Fast-dLLM parallel factor: largest n with (n+1)(1 − c(n)) ≤ factor
    DRIFT = "drift"  # Polestar-Commit: the threshold rule + an early commit on drift events (needs cache=polestar)


class EntrySchedule(StrEnum):
    ALTERNATE = "alternate"  # paper: full entry on even blocks, windowed on odd ones
    CODE = "code"  # public code: windowed entry only when b % 4 == 3


class DriftReference(StrEnum):
    LAST_REFRESH = "last_refresh"  # public code: drift accumulates since the last refresh / block entry
    PREVIOUS_STEP = "previous_step"  # Algorithm 1 literally


class CacheKind(StrEnum):
    NONE = "none"  # full recompute every step
    PREFIX = "prefix"  # Fast-dLLM prefix cache
    DUAL = "dual"  # Fast-dLLM dual cache
    ELASTIC = "elastic"  # Elastic-Cache: attention-drift test on tracked tokens, refresh from that layer on
    D2 = "d2"  # d2Cache: two-stage query selection + attention-rollout nucleus
    ENTROPY = "entropy"  # EntropyCache, reconstructed from its paper (no public code)
    POLESTAR = "polestar"  # Polestar-Cache (+ Polestar-Commit per the switches)


def _f(default: Any, help: str, group: str, lo: float | None = None, hi: float | None = None,
       step: float | None = None, choices: tuple | None = None) -> Any:
    meta = {"help": help, "group": group, "min": lo, "max": hi, "step": step, "choices": choices}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class DecodeConfig:
    gen_length: int = _f(256, "generated positions (the canvas after the prompt)", "decoding", 8, 1024, 8)
    block_length: int = _f(32, "semi-autoregressive block size B", "decoding", 1, 1024, 1)
    steps: int = _f(0, "quota rule: total steps (0 = gen_length, one token per step)", "decoding", 0, 1024, 1)
    temperature: float = _f(0.0, "sampling temperature (0 = argmax; Gumbel-max in float64 otherwise)", "decoding",
                            0.0, 2.0, 0.05)
    seed: int = _f(0, "seed of the sampling generator (ignored at temperature 0)", "decoding", 0, 2**31 - 1, 1)
    commit: CommitRule = _f(CommitRule.QUOTA, "commit rule", "commit", choices=tuple(CommitRule))
    tau_s: float = _f(0.9, "confidence threshold τ_s of the threshold rule", "commit", 0.0, 1.0, 0.01)
    commit_factor: float = _f(1.0, "factor rule: parallel factor f (Fast-dLLM)", "commit", 0.0, 8.0, 0.1)
    commit_window: int = _f(0, "sliding commit window: the first W masked positions (0 = the current block; "
                            "Elastic-Cache's window)", "commit", 0, 1024, 1)
    d2_prior_sigma: float = _f(0.0, "d2Cache certainty prior: Gaussian std σ in positions (0 = off)", "commit",
                               0.0, 64.0, 0.5)
    cache: CacheKind = _f(CacheKind.NONE, "cache policy", "cache", choices=tuple(CacheKind))
    fastdllm_refresh_interval: int = _f(0, "prefix/dual cache: full refresh every k steps inside a block (0 = block "
                                        "entry only)", "cache", 0, 1024, 1)
    elastic_gamma: float = _f(0.9, "Elastic-Cache: refresh when tracked attention similarity < γ", "elastic",
                              0.0, 1.0, 0.01)
    elastic_track: int = _f(1, "Elastic-Cache: most-attended tokens tracked per layer", "elastic", 1, 64, 1)
    d2_k: int = _f(32, "d2Cache: masked candidates queried per step", "d2cache", 1, 1024, 1)
    d2_rollout_p: float = _f(0.1, "d2Cache: attention-rollout nucleus mass", "d2cache", 0.0, 1.0, 0.01)
    entropy_tau: float = _f(1.0, "EntropyCache: full recompute when a token decoded last step had entropy > τ "
                            "(nats)", "entropycache", 0.0, 20.0, 0.05)
    entropy_k: int = _f(4, "EntropyCache: recently decoded tokens re-queried on skip steps", "entropycache",
                        0, 256, 1)
    polestar_cache: bool = _f(True, "Polestar-Cache: windowed entries, clustered drift, sparse refresh", "polestar")
    polestar_current_commit: bool = _f(True, "Polestar-Commit: early commit on drift events in the current block "
                                       "(with commit='drift'; off, the drift rule is its threshold base)", "polestar")
    polestar_suffix_commit: bool = _f(True, "Polestar-Commit: commit suffix tokens from refreshed logits", "polestar")
    polestar_window_prefix: int = _f(2, "local window Ω_b before the block, in blocks (2 = 2B)", "polestar", 0, 8, 1)
    polestar_window_suffix: int = _f(1, "local window Ω_b after the block, in blocks (1 = B)", "polestar", 0, 8, 1)
    polestar_centroids: int = _f(8, "centroids K per layer, split prefix/suffix by length", "polestar", 2, 64, 1)
    polestar_refresh_clusters: int = _f(4, "top-k: clusters refreshed per layer on a refresh step", "polestar",
                                        1, 64, 1)
    polestar_refresh_clusters_last: int = _f(4, "top-k at the final layer (public code: 1)", "polestar", 1, 64, 1)
    polestar_tau_upd: int = _f(3, "τ_upd: refresh after a step committing ≥ τ_upd−1 or τ_upd cumulative tokens "
                               "(0 = never)", "polestar", 0, 64, 1)
    polestar_history: int = _f(5, "drift history h: the last h drift vectors of the block", "polestar", 0, 64, 1)
    polestar_alpha: float = _f(10.0, "α of the early-commit gate τ_d = α(τ_s − c)²", "polestar", 0.0, 100.0, 0.5)
    polestar_tau_early: float = _f(0.7, "τ_early: an early commit needs confidence above this", "polestar",
                                   0.0, 1.0, 0.01)
    polestar_delta_max: float = _f(2.0, "δ_max: an early commit needs drift delta below this", "polestar",
                                   0.0, 100.0, 0.1)
    polestar_tau_suffix: float = _f(0.9, "τ_suffix: suffix commit confidence threshold", "polestar", 0.0, 1.0, 0.01)
    polestar_hidden_format: str = _f("nvfp4-residual", "format of the cached window hidden states", "polestar",
                                     choices=FORMATS)
    polestar_entry_schedule: EntrySchedule = _f(EntrySchedule.ALTERNATE, "block-entry schedule", "polestar",
                                                choices=tuple(EntrySchedule))
    polestar_drift_reference: DriftReference = _f(DriftReference.LAST_REFRESH, "reference of the cluster drift",
                                                  "polestar", choices=tuple(DriftReference))
    polestar_kmeans_iters: int = _f(5, "spherical k-means iterations", "polestar", 1, 50, 1)
    impl: str = _f("auto", "kernels: 'triton' (CUDA, or the interpreter in tests), 'torch' references, 'auto' "
                   "(Triton on a CUDA device)", "system", choices=("auto", "triton", "torch"))
    offload: str = _f("auto", "keep the quantized window in host memory and prefetch refreshed rows ('auto': on a "
                      "CUDA device, pinned memory + copy stream; 'on' also on CPU, synchronously)", "system",
                      choices=("auto", "on", "off"))
    overlap: str = _f("auto", "run Polestar's per-layer extra work (proxy attention, drift, refresh packets) beside "
                      "the block's attention and MLP: on a side CUDA stream ('auto', 'on'), or on a CPU on a worker "
                      "thread ('on' only: it does not pay on a CPU, docs/algorithm.md §4)", "system",
                      choices=("auto", "on", "off"))
    device_select: str = _f("auto", "pick Polestar's refresh rows on the device, padded to a size the host knows, so "
                            "a refresh step never waits for the device between layers ('auto': on a CUDA device "
                            "whose window is not offloaded; 'on' also on CPU, with the same tokens)", "system",
                            choices=("auto", "on", "off"))
    measure_staleness: bool = _f(False, "measure KV staleness against a full recompute each step (not counted "
                                 "in NFE or TPS)", "analysis")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value, meta = getattr(self, f.name), f.metadata
            if meta["choices"] is not None:
                if str(value) not in [str(c) for c in meta["choices"]]:
                    allowed = ", ".join(str(c) for c in meta["choices"])
                    raise ConfigError(f"{f.name}={value!r} is not allowed: choose one of {allowed}")
                object.__setattr__(self, f.name, type(f.default)(str(value)))
                continue
            if isinstance(f.default, bool):
                if not isinstance(value, bool):
                    raise ConfigError(f"{f.name} must be true or false, got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"{f.name} must be a finite number, got {value!r}")
            if isinstance(f.default, int) and not isinstance(f.default, bool) and value != int(value):
                raise ConfigError(f"{f.name} must be an integer, got {value!r}")
            if not meta["min"] <= value <= meta["max"]:
                raise ConfigError(f"{f.name}={value} is out of range: use a value in [{meta['min']}, {meta['max']}]")
        for name in ("polestar_refresh_clusters", "polestar_refresh_clusters_last"):
            if getattr(self, name) > self.polestar_centroids:
                raise ConfigError(
                    f"{name}={getattr(self, name)} exceeds polestar_centroids={self.polestar_centroids}: "
                    "refresh at most every cluster"
                )
        if self.gen_length % self.block_length:
            raise ConfigError(
                f"gen_length={self.gen_length} is not a multiple of block_length={self.block_length}: "
                f"pick a gen_length in steps of {self.block_length}"
            )
        if self.commit == CommitRule.DRIFT and self.cache != CacheKind.POLESTAR:
            raise ConfigError(f"commit='drift' reads the token drift that only cache='polestar' measures (cache is "
                              f"{str(self.cache)!r}): use commit='threshold' or cache='polestar'")
        n_blocks = self.gen_length // self.block_length
        if self.commit == CommitRule.QUOTA and self.total_steps % n_blocks:
            raise ConfigError(
                f"steps={self.total_steps} must be a multiple of the number of blocks ({n_blocks}) for the quota rule"
            )

    @property
    def total_steps(self) -> int:
        return self.steps or self.gen_length

    @property
    def n_blocks(self) -> int:
        return self.gen_length // self.block_length

    def replace(self, **overrides: Any) -> "DecodeConfig":
        overrides = upgrade_names(overrides)
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            known = ", ".join(f.name for f in dataclasses.fields(self))
            raise ConfigError(f"unknown config field(s) {', '.join(unknown)}: known fields are {known}")
        return dataclasses.replace(self, **overrides)


# Field names before the method prefixes (deprecated: accepted with a warning for one release).
DEPRECATED_NAMES: dict[str, str] = {
    "window": "commit_window", "factor": "commit_factor", "prior_sigma": "d2_prior_sigma",
    "refresh_interval": "fastdllm_refresh_interval", "current_commit": "polestar_current_commit",
    "suffix_commit": "polestar_suffix_commit", "window_prefix": "polestar_window_prefix",
    "window_suffix": "polestar_window_suffix", "n_centroids": "polestar_centroids",
    "top_k": "polestar_refresh_clusters", "top_k_last_layer": "polestar_refresh_clusters_last",
    "tau_upd": "polestar_tau_upd", "history": "polestar_history", "alpha": "polestar_alpha",
    "tau_early": "polestar_tau_early", "delta_max": "polestar_delta_max", "tau_suffix": "polestar_tau_suffix",
    "hidden_format": "polestar_hidden_format", "entry_schedule": "polestar_entry_schedule",
    "drift_reference": "polestar_drift_reference", "kmeans_iters": "polestar_kmeans_iters",
}


def upgrade_names(values: dict[str, Any], warn: bool = True) -> dict[str, Any]:
    """`values` with deprecated field names replaced by the current ones (a DeprecationWarning names each unless
    `warn` is off: a file written before the rename is upgraded silently), and `overlap` given as a switch (true or
    false, before 'auto' / 'on' / 'off') read as 'auto' or 'off'."""
    if isinstance(values.get("overlap"), bool):  # a switch before it became auto / on / off
        values = {**values, "overlap": "auto" if values["overlap"] else "off"}
    old = [k for k in values if k in DEPRECATED_NAMES]
    if not old:
        return values
    import warnings

    for k in old:
        if DEPRECATED_NAMES[k] in values:
            raise ConfigError(f"{k} and {DEPRECATED_NAMES[k]} name one field: pass only {DEPRECATED_NAMES[k]}")
        if warn:
            warnings.warn(f"config field {k!r} is now {DEPRECATED_NAMES[k]!r}", DeprecationWarning, stacklevel=3)
    return {DEPRECATED_NAMES.get(k, k): v for k, v in values.items()}


BASELINE = DecodeConfig()
PARALLEL = DecodeConfig(commit=CommitRule.THRESHOLD)
FAST_DLLM = DecodeConfig(commit=CommitRule.THRESHOLD, cache=CacheKind.DUAL)
FAST_DLLM_PREFIX = DecodeConfig(commit=CommitRule.THRESHOLD, cache=CacheKind.PREFIX)
# Elastic-Cache's LLaDA defaults: γ 0.9, one tracked token per layer, a 32-position sliding window, τ 0.9.
ELASTIC_CACHE = DecodeConfig(commit=CommitRule.THRESHOLD, cache=CacheKind.ELASTIC, commit_window=32)
# d2Cache's defaults: 32 masked candidates, rollout nucleus p 0.1, one token per step ranked with the certainty
# prior (σ 10, d2Cache's LLaDA setting is unverified: see docs/baselines.md §2.8).
D2CACHE = DecodeConfig(commit=CommitRule.QUOTA, cache=CacheKind.D2, d2_prior_sigma=10.0)
# EntropyCache (reconstructed): threshold decoding on the d2Cache-style query forward, entropy-triggered refresh.
ENTROPY_CACHE = DecodeConfig(commit=CommitRule.THRESHOLD, cache=CacheKind.ENTROPY)
# Polestar (paper Table 5 defaults) on Fast-dLLM's dual cache + the threshold rule with drift commits.
POLESTAR = DecodeConfig(commit=CommitRule.DRIFT, cache=CacheKind.POLESTAR)
POLESTAR_CACHE_ONLY = POLESTAR.replace(polestar_current_commit=False, polestar_suffix_commit=False)
# The public code's choices: windowed entry only every 4th block, top-1 cluster at the last layer.
POLESTAR_CODE = POLESTAR.replace(polestar_entry_schedule=EntrySchedule.CODE, polestar_refresh_clusters_last=1)

PRESETS: dict[str, DecodeConfig] = {
    "baseline": BASELINE,
    "parallel": PARALLEL,
    "fast-dllm": FAST_DLLM,
    "fast-dllm-prefix": FAST_DLLM_PREFIX,
    "elastic-cache": ELASTIC_CACHE,
    "d2cache": D2CACHE,
    "entropy-cache": ENTROPY_CACHE,
    "polestar": POLESTAR,
    "polestar-cache": POLESTAR_CACHE_ONLY,
    "polestar-code": POLESTAR_CODE,
}


def resolve(method: str | DecodeConfig, **overrides: Any) -> DecodeConfig:
    """A preset by name (or a config) with field overrides; every error names the field or the method."""
    if isinstance(method, DecodeConfig):
        base = method
    elif method in PRESETS:
        base = PRESETS[method]
    else:
        raise ConfigError(f"unknown method {method!r}: choose one of {', '.join(PRESETS)}")
    return base.replace(**overrides) if overrides else base
