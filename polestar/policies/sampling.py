"""Proposals and confidences from logits, and d2Cache's certainty density."""

from __future__ import annotations

import math

import torch


def propose(
    logits: torch.Tensor, temperature: float, generator: torch.Generator | None, mask_id: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [batch, n, vocab] -> (tokens [batch, n], confidence [batch, n] float64).

    The mask token is never proposed (an untrained or random model may rank it first, and committing it would
    leave the position masked forever); the confidence is still the softmax over the full vocabulary.

    Confidence is the clean softmax probability of the chosen token, in float64 as Fast-dLLM computes it.
    At temperature > 0 the token is the Gumbel-max of logits / temperature with float64 noise (LLaDA's trick;
    float32 Gumbel noise visibly degrades sampling, as Fast-dLLM notes) drawn from the explicit generator.
    """
    logits = logits.double()
    choice = logits if mask_id is None else logits.index_fill(-1, torch.tensor([mask_id], device=logits.device),
                                                              float("-inf"))
    if temperature > 0:
        u = torch.rand(logits.shape, dtype=torch.float64, generator=generator, device=logits.device)
        tokens = (choice / temperature - torch.log(-torch.log(u.clamp_min(1e-300)))).argmax(dim=-1)
    else:
        tokens = choice.argmax(dim=-1)
    confidence = logits.softmax(dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return tokens, confidence


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of softmax(logits) over the last dim, float64."""
    logp = logits.double().log_softmax(dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def certainty_density(decoded: torch.Tensor, sigma: float) -> torch.Tensor:
    """d2Cache's certainty prior: Gaussian-weighted (std `sigma`) average of the decoded indicator around each
    position. decoded [batch, n] bool -> density [batch, n] float64. The left edge is padded as decoded (the
    prompt precedes it); the right edge as decoded only when the last position is."""
    b, n = decoded.shape
    radius = max(1, int(math.ceil(3 * sigma)))
    offsets = torch.arange(-radius, radius + 1, dtype=torch.float64, device=decoded.device)
    kernel = torch.exp(-0.5 * (offsets / sigma) ** 2)
    kernel = kernel / kernel.sum()
    x = decoded.double()
    left = torch.ones(b, radius, dtype=torch.float64, device=decoded.device)
    right = x[:, -1:].expand(b, radius)
    padded = torch.cat([left, x, right], dim=1)
    return torch.nn.functional.conv1d(padded.unsqueeze(1), kernel.view(1, 1, -1)).squeeze(1)
