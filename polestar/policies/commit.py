"""Commit rules as small pure classes, vectorised over the batch.

Inputs: `confidence` [batch, n] float64 with −inf on positions that are not eligible (committed already or
outside the commit window) and `rank` [batch, n], the score that orders positions (the confidence itself,
or confidence × certainty density with d2Cache's prior). Output: `Commit` masks [batch, n].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from polestar.config import CacheKind, CommitRule, DecodeConfig
from polestar.errors import ConfigError


@dataclass
class Commit:
    mask: torch.Tensor  # [batch, n] bool: commit these positions
    forced: torch.Tensor  # [batch, n] bool: the subset committed only by the progress guarantee
    drift: torch.Tensor | None = None  # [batch, n] bool: the subset committed by Polestar's drift rule


def _ranked(rank: torch.Tensor) -> torch.Tensor:
    """Positions by descending score; ties go to the leftmost position (stable sort)."""
    return torch.sort(rank, dim=-1, descending=True, stable=True).indices


def _top1(confidence: torch.Tensor, rank: torch.Tensor) -> torch.Tensor:
    eligible = torch.isfinite(confidence)
    best = rank.masked_fill(~eligible, float("-inf")).argmax(dim=-1, keepdim=True)
    top = torch.zeros_like(eligible).scatter_(-1, best, True)
    return top & eligible


class QuotaPolicy:
    """LLaDA low-confidence remasking: commit the `k` best-ranked eligible positions, `k` from the block's plan."""

    def select(self, confidence: torch.Tensor, rank: torch.Tensor, k: int, delta: torch.Tensor | None = None) -> Commit:
        eligible = torch.isfinite(confidence)
        order = _ranked(rank.masked_fill(~eligible, float("-inf")))
        take = torch.zeros_like(eligible)
        take.scatter_(-1, order[:, :k], True)
        mask = take & eligible
        return Commit(mask=mask, forced=torch.zeros_like(mask))


class ThresholdPolicy:
    """Fast-dLLM: every eligible position with confidence ≥ τ_s, and always the best-ranked one."""

    def __init__(self, tau_s: float) -> None:
        if not 0.0 <= tau_s <= 1.0:
            raise ConfigError(f"tau_s must be in [0, 1], got {tau_s}")
        self.tau_s = tau_s

    def select(self, confidence: torch.Tensor, rank: torch.Tensor, k: int = 0,
               delta: torch.Tensor | None = None) -> Commit:
        above = confidence >= self.tau_s
        top = _top1(confidence, rank)
        return Commit(mask=above | top, forced=top & ~above)


class FactorPolicy:
    """Fast-dLLM parallel factor: commit the top n* positions, n* the longest prefix of ranks with
    (n+1)(1 − c(n)) ≤ f; rank 1 is always admissible (upstream's last-rank bump is not reproduced)."""

    def __init__(self, factor: float) -> None:
        if factor < 0:
            raise ConfigError(f"factor must be ≥ 0, got {factor}")
        self.factor = factor

    def select(self, confidence: torch.Tensor, rank: torch.Tensor, k: int = 0,
               delta: torch.Tensor | None = None) -> Commit:
        eligible = torch.isfinite(confidence)
        order = _ranked(confidence.masked_fill(~eligible, float("-inf")))
        c = confidence.gather(-1, order)
        n = torch.arange(1, c.shape[-1] + 1, device=c.device, dtype=c.dtype)
        admissible = ((n + 1) * (1 - c) <= self.factor) & torch.isfinite(c)
        ok = admissible.clone()
        ok[:, 0] = torch.isfinite(c[:, 0])
        prefix = ok.long().cumprod(dim=-1).bool()
        mask = torch.zeros_like(eligible).scatter_(-1, order, prefix)
        forced_first = ok[:, :1] & ~admissible[:, :1]
        forced = torch.zeros_like(mask).scatter_(-1, order[:, :1], forced_first)
        return Commit(mask=mask, forced=forced)


class DriftCommitPolicy(ThresholdPolicy):
    """Polestar-Commit, current block (docs/algorithm.md §3): the threshold rule, plus an early commit of a
    masked position with τ_early < c < τ_s whose drift delta Δ satisfies τ_d ≤ Δ < δ_max, where
    τ_d = α(τ_s − c)²: the less confident a token, the sharper the drift event it needs."""

    def __init__(self, tau_s: float, alpha: float, tau_early: float, delta_max: float) -> None:
        super().__init__(tau_s)
        self.alpha, self.tau_early, self.delta_max = alpha, tau_early, delta_max

    def gate(self, confidence: torch.Tensor) -> torch.Tensor:
        """τ_d = α(τ_s − c)² per position."""
        return self.alpha * (self.tau_s - confidence) ** 2

    def select(self, confidence: torch.Tensor, rank: torch.Tensor, k: int = 0,
               delta: torch.Tensor | None = None) -> Commit:
        base = super().select(confidence, rank, k)
        if delta is None:
            return base
        band = (confidence > self.tau_early) & (confidence < self.tau_s)
        early = band & (delta >= self.gate(confidence)) & (delta < self.delta_max) & ~base.mask
        return Commit(mask=base.mask | early, forced=base.forced & ~early, drift=early)


def make_commit_policy(cfg: DecodeConfig) -> QuotaPolicy | ThresholdPolicy | FactorPolicy:
    if cfg.cache == CacheKind.POLESTAR and cfg.current_commit and cfg.commit == CommitRule.THRESHOLD:
        return DriftCommitPolicy(cfg.tau_s, cfg.alpha, cfg.tau_early, cfg.delta_max)
    if cfg.commit == CommitRule.QUOTA:
        return QuotaPolicy()
    if cfg.commit == CommitRule.THRESHOLD:
        return ThresholdPolicy(cfg.tau_s)
    return FactorPolicy(cfg.factor)
