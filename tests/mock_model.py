"""A scripted stand-in for a model: logits are a fixed function of the canvas, known by construction."""

from __future__ import annotations

import torch


class ScriptedModel:
    """Position j proposes token `tokens[j]` with probability `confidence[j]` (rest spread evenly), whatever the
    canvas holds. Counts its forwards."""

    def __init__(self, tokens: torch.Tensor, confidence: torch.Tensor, vocab: int = 16, mask_id: int = 15) -> None:
        self.tokens, self.confidence, self.vocab, self.mask_id = tokens, confidence.double(), vocab, mask_id
        self.eos_id, self.logit_shift, self.calls = 0, 0, 0

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        n = ids.shape[1]
        rest = (1 - self.confidence[:n]) / (self.vocab - 1)
        probs = rest[:, None].expand(n, self.vocab).clone()
        probs[torch.arange(n), self.tokens[:n]] = self.confidence[:n]
        return probs.log().unsqueeze(0).expand(ids.shape[0], n, self.vocab)
