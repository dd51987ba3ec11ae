"""Rankers: the score that orders eligible positions for a commit rule. The default is the confidence itself;
d2Cache's certainty prior multiplies it by the density of already-decoded positions around each target."""

from __future__ import annotations

import torch

from polestar.config import DecodeConfig
from polestar.policies.sampling import certainty_density


class ConfidenceRanker:
    def __call__(self, confidence: torch.Tensor, canvas: torch.Tensor, prompt_len: int,
                 targets: torch.Tensor) -> torch.Tensor:
        return confidence


class CertaintyPriorRanker:
    """confidence × certainty density (Gaussian std σ over the generated region's decoded indicator)."""

    def __init__(self, sigma: float, mask_id: int) -> None:
        self.sigma, self.mask_id = sigma, mask_id

    def __call__(self, confidence: torch.Tensor, canvas: torch.Tensor, prompt_len: int,
                 targets: torch.Tensor) -> torch.Tensor:
        """confidence [batch, n] for `targets` [n] of `canvas` [batch, length] -> rank [batch, n]."""
        decoded = canvas[:, prompt_len:] != self.mask_id
        return confidence * certainty_density(decoded, self.sigma)[:, targets - prompt_len]


def make_ranker(cfg: DecodeConfig, mask_id: int) -> ConfidenceRanker | CertaintyPriorRanker:
    return CertaintyPriorRanker(cfg.d2_prior_sigma, mask_id) if cfg.d2_prior_sigma > 0 else ConfidenceRanker()
