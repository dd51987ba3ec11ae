"""Commit rules as small pure classes, vectorised over the batch.

Inputs: `confidence` [batch, n] float64 with −inf on positions that are not eligible (committed already or
outside the commit window), `rank` [batch, n], the score that orders positions (the confidence itself, or a
ranker's score: `policies.ranking`), and the step's `CommitContext` (its index in the block, the block's masks
at entry, and the cache policy's per-target signals). Output: a `Selection` of masks [batch, n].

Each rule names the `CommitReason` of its commits; a rule with sub-rules (Polestar's drift commit) names the
subsets in `Selection.by_reason`. The extra-target rule (`ExtraTargetPolicy`) decides commits beyond the
commit window from predictions a cache policy offers (`caches.base.ExtraTargets`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch

from polestar.config import CommitRule, DecodeConfig
from polestar.errors import ConfigError
from polestar.kinds import CommitReason


@dataclass(frozen=True)
class CommitContext:
    """What a rule may know about the step besides confidences."""

    step: int  # index of this forward within the block (0 = the block's entry forward)
    block_masks: int | tuple[int, ...]  # masked positions of the block when it started (a tuple: one per row)
    steps_per_block: int  # the quota rule's step budget per block
    signals: dict[str, torch.Tensor] = field(default_factory=dict)  # per-target [batch, n], from the cache policy


@dataclass
class Selection:
    mask: torch.Tensor  # [batch, n] bool: commit these positions
    forced: torch.Tensor  # [batch, n] bool: the subset committed only by the progress guarantee
    by_reason: dict[CommitReason, torch.Tensor] = field(default_factory=dict)  # subsets a sub-rule committed


def _ranked(rank: torch.Tensor) -> torch.Tensor:
    """Positions by descending score; ties go to the leftmost position (stable sort)."""
    return torch.sort(rank, dim=-1, descending=True, stable=True).indices


def _top1(confidence: torch.Tensor, rank: torch.Tensor) -> torch.Tensor:
    eligible = torch.isfinite(confidence)
    best = rank.masked_fill(~eligible, float("-inf")).argmax(dim=-1, keepdim=True)
    top = torch.zeros_like(eligible).scatter_(-1, best, True)
    return top & eligible


class CommitPolicy(ABC):
    """Base of the commit rules: `select` is the rule; `reason` names its commits in the trace."""

    reason: CommitReason

    @abstractmethod
    def select(self, confidence: torch.Tensor, rank: torch.Tensor, ctx: CommitContext) -> Selection:
        """The commit masks of one step."""

    def trace_columns(self, confidence: torch.Tensor, ctx: CommitContext) -> dict[str, list[float]]:
        """Extra per-target trace columns of the rule (row 0); none by default."""
        return {}


def quota_plan(n_masks: int, steps: int) -> list[int]:
    """LLaDA's plan: `n_masks` split over `steps` steps as evenly as possible, the remainder to the first."""
    base, extra = divmod(n_masks, steps)
    return [base + (1 if i < extra else 0) for i in range(steps)]


class QuotaPolicy(CommitPolicy):
    """LLaDA low-confidence remasking: commit the k best-ranked eligible positions, k from the block's plan
    (one more step than planned commits one: the loop always runs until the block has no masks)."""

    reason = CommitReason.QUOTA

    def select(self, confidence: torch.Tensor, rank: torch.Tensor, ctx: CommitContext) -> Selection:
        eligible = torch.isfinite(confidence)
        order = _ranked(rank.masked_fill(~eligible, float("-inf")))
        take = torch.zeros_like(eligible)
        if isinstance(ctx.block_masks, int):
            take.scatter_(-1, order[:, :self._quota(ctx.block_masks, ctx)], True)
        else:  # a row each: its block's own plan
            k = torch.tensor([self._quota(n, ctx) for n in ctx.block_masks], device=order.device)
            take.scatter_(-1, order, torch.arange(order.shape[-1], device=order.device) < k.unsqueeze(1))
        mask = take & eligible
        return Selection(mask=mask, forced=torch.zeros_like(mask))

    @staticmethod
    def _quota(block_masks: int, ctx: CommitContext) -> int:
        plan = quota_plan(block_masks, ctx.steps_per_block)
        return plan[ctx.step] if ctx.step < len(plan) else 1


class ThresholdPolicy(CommitPolicy):
    """Fast-dLLM: every eligible position with confidence ≥ τ_s, and always the best-ranked one."""

    reason = CommitReason.THRESHOLD

    def __init__(self, tau_s: float) -> None:
        if not 0.0 <= tau_s <= 1.0:
            raise ConfigError(f"tau_s must be in [0, 1], got {tau_s}")
        self.tau_s = tau_s

    def select(self, confidence: torch.Tensor, rank: torch.Tensor, ctx: CommitContext | None = None) -> Selection:
        above = confidence >= self.tau_s
        top = _top1(confidence, rank)
        return Selection(mask=above | top, forced=top & ~above)


class FactorPolicy(CommitPolicy):
    """Fast-dLLM parallel factor: commit the top n* positions, n* the longest prefix of ranks with
    (n+1)(1 − c(n)) ≤ f; rank 1 is always admissible (upstream's last-rank bump is not reproduced)."""

    reason = CommitReason.FACTOR

    def __init__(self, factor: float) -> None:
        if factor < 0:
            raise ConfigError(f"factor must be ≥ 0, got {factor}")
        self.factor = factor

    def select(self, confidence: torch.Tensor, rank: torch.Tensor, ctx: CommitContext | None = None) -> Selection:
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
        return Selection(mask=mask, forced=forced)


class DriftCommitPolicy(ThresholdPolicy):
    """Polestar-Commit, current block (docs/algorithm.md §3): the threshold rule, plus an early commit of a
    masked position with τ_early < c < τ_s whose drift delta Δ (the cache policy's "delta" signal) satisfies
    τ_d ≤ Δ < δ_max, where τ_d = α(τ_s − c)²: the less confident a token, the sharper the drift event it
    needs. Without the signal (a forward that measured no drift) it is the threshold rule."""

    def __init__(self, tau_s: float, alpha: float, tau_early: float, delta_max: float) -> None:
        super().__init__(tau_s)
        self.alpha, self.tau_early, self.delta_max = alpha, tau_early, delta_max

    def gate(self, confidence: torch.Tensor) -> torch.Tensor:
        """τ_d = α(τ_s − c)² per position."""
        return self.alpha * (self.tau_s - confidence) ** 2

    def select(self, confidence: torch.Tensor, rank: torch.Tensor, ctx: CommitContext | None = None) -> Selection:
        base = super().select(confidence, rank)
        delta = None if ctx is None else ctx.signals.get("delta")
        if delta is None:
            return base
        band = (confidence > self.tau_early) & (confidence < self.tau_s)
        early = band & (delta >= self.gate(confidence)) & (delta < self.delta_max) & ~base.mask
        return Selection(mask=base.mask | early, forced=base.forced & ~early, by_reason={CommitReason.DRIFT: early})

    def trace_columns(self, confidence: torch.Tensor, ctx: CommitContext) -> dict[str, list[float]]:
        """The gate beside the signals it compares, for the trace (row 0)."""
        return {"drift_gate": self.gate(confidence[0]).tolist()} if "delta" in ctx.signals else {}


class ExtraTargetPolicy:
    """Commits among a cache policy's extra targets (Polestar's suffix commit, docs/algorithm.md §3): every
    still-masked one with confidence ≥ τ; no forced commit."""

    reason = CommitReason.SUFFIX

    def __init__(self, tau: float) -> None:
        if not 0.0 <= tau <= 1.0:
            raise ConfigError(f"tau_suffix must be in [0, 1], got {tau}")
        self.tau = tau

    def select(self, confidence: torch.Tensor, still_masked: torch.Tensor) -> torch.Tensor:
        """confidence [batch, m], still_masked [batch, m] bool -> commit mask [batch, m]."""
        return (confidence >= self.tau) & still_masked


def make_commit_policy(cfg: DecodeConfig) -> CommitPolicy:
    if cfg.commit == CommitRule.DRIFT:
        if cfg.polestar_current_commit:
            return DriftCommitPolicy(cfg.tau_s, cfg.polestar_alpha, cfg.polestar_tau_early, cfg.polestar_delta_max)
        return ThresholdPolicy(cfg.tau_s)  # the drift rule switched off: its threshold base
    if cfg.commit == CommitRule.QUOTA:
        return QuotaPolicy()
    if cfg.commit == CommitRule.THRESHOLD:
        return ThresholdPolicy(cfg.tau_s)
    return FactorPolicy(cfg.commit_factor)


def make_extra_target_policy(cfg: DecodeConfig) -> ExtraTargetPolicy | None:
    return ExtraTargetPolicy(cfg.polestar_tau_suffix) if cfg.polestar_suffix_commit else None
