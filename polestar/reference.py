"""LLaDA's own sampler, written for clarity: the oracle the main decode loop must match.

Low-confidence remasking over semi-autoregressive blocks (LLaDA `generate.py`, checkpoints.md §1.6):
the canvas is the prompt followed by `gen_length` mask tokens, decoded block by block left to right. Each
block gets `steps / n_blocks` steps; step i commits a planned number of tokens (the block's masks split
evenly, the remainder going to the first steps). Every step is one full forward over the whole canvas; each
masked position of the current block proposes its argmax token (Gumbel-max in float64 when temperature > 0)
with confidence = the clean softmax probability (float64) of that token; the most confident ones commit
(ties go to the leftmost position).

`threshold` switches the commit rule to confidence-threshold parallel decoding (Fast-dLLM): every masked
position of the block with confidence ≥ threshold commits, and always at least the most confident one; the
block then runs until it has no masks (`steps` is ignored).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from polestar.errors import ConfigError


@dataclass
class ReferenceOutput:
    canvas: torch.Tensor  # [batch, prompt_len + gen_length] final token ids
    nfe: int  # forwards run
    committed_per_row: list[int]  # tokens committed per row (= gen_length)
    steps_per_row: list[int]  # forwards in which each row still had masks in its block


def planned_commits(n_masks: int, steps: int) -> list[int]:
    """Split `n_masks` over `steps` steps as evenly as possible, remainder to the first steps."""
    base, extra = divmod(n_masks, steps)
    return [base + (1 if i < extra else 0) for i in range(steps)]


@torch.no_grad()
def generate(
    model,
    prompt_ids: torch.Tensor,
    gen_length: int = 256,
    block_length: int = 32,
    steps: int | None = None,
    temperature: float = 0.0,
    threshold: float | None = None,
    generator: torch.Generator | None = None,
) -> ReferenceOutput:
    """Decode `prompt_ids` [batch, prompt_len] (unpadded, same length per row). `steps` defaults to
    gen_length (one token per step)."""
    steps = gen_length if steps is None else steps
    if gen_length % block_length:
        raise ConfigError(f"gen_length {gen_length} must be a multiple of block_length {block_length}")
    n_blocks = gen_length // block_length
    if steps % n_blocks:
        raise ConfigError(f"steps {steps} must be a multiple of the number of blocks {n_blocks}")
    batch, prompt_len = prompt_ids.shape
    mask_id = model.mask_id
    masks = torch.full((batch, gen_length), mask_id, dtype=prompt_ids.dtype, device=prompt_ids.device)
    canvas = torch.cat([prompt_ids, masks], dim=1)
    nfe, steps_per_row = 0, [0] * batch

    for b in range(n_blocks):
        start, end = prompt_len + b * block_length, prompt_len + (b + 1) * block_length
        plan = [planned_commits(block_length, steps // n_blocks)] * batch
        step = 0
        while bool((canvas[:, start:end] == mask_id).any()):
            logits = model(canvas).double()
            nfe += 1
            proposal, confidence = _propose(logits, temperature, generator, mask_id)
            still_masked = canvas == mask_id
            in_block = torch.zeros_like(still_masked)
            in_block[:, start:end] = True
            confidence = confidence.masked_fill(~(still_masked & in_block), float("-inf"))
            for row in range(batch):
                n_masked = int((still_masked[row, start:end]).sum())
                if n_masked == 0:
                    continue
                steps_per_row[row] += 1
                if threshold is None:
                    # stable sort: equal confidences commit left to right, so ties are deterministic
                    order = torch.sort(confidence[row], descending=True, stable=True).indices
                    chosen = order[: plan[row][step]]
                else:
                    chosen = (confidence[row] >= threshold).nonzero().flatten()
                    if chosen.numel() == 0:
                        chosen = confidence[row].argmax().view(1)
                canvas[row, chosen] = proposal[row, chosen]
            step += 1
    return ReferenceOutput(canvas, nfe, [gen_length] * batch, steps_per_row)


def _propose(
    logits: torch.Tensor, temperature: float, generator: torch.Generator | None, mask_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token per position (argmax, or Gumbel-max at `temperature`) and its clean softmax probability.
    The mask token itself is never proposed."""
    probs = logits.softmax(dim=-1)
    candidates = logits.clone()
    candidates[..., mask_id] = float("-inf")
    if temperature > 0:
        u = torch.rand(logits.shape, dtype=torch.float64, generator=generator, device=logits.device)
        gumbel = -torch.log(-torch.log(u.clamp_min(1e-300)))
        tokens = (candidates / temperature + gumbel).argmax(dim=-1)
    else:
        tokens = candidates.argmax(dim=-1)
    return tokens, probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
