"""LLaDA's supervised masked-diffusion objective and the row types the embedded model trains with (uniform,
block-causal, focus, focus-block and order rows): which tokens of a batch are masked and scored, and the loss
(`polestar.train.trainer` runs it; the model card's "Data and objective" says why each row type exists)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from polestar.models.transformer import Transformer


def sft_loss(model: Transformer, ids: torch.Tensor, response: torch.Tensor, mask_id: int, eps: float,
             generator: torch.Generator, block_rows: float = 0.0, block_length: int = 32,
             eos_id: int | None = None, focus: torch.Tensor | None = None, focus_rows: float = 0.0,
             focus_block_rows: float = 0.0, order_rows: float = 0.0, order_rounds: int = 2) -> torch.Tensor:
    """LLaDA's SFT loss for one batch: ids [b, L], response [b, L] bool. The mask ratios are stratified over the
    batch (row i gets t from the i-th of b equal slices of U(ε, 1), one shared offset, rows shuffled): each t is
    still U(ε, 1), but the batch covers the range evenly, which lowers the variance of the 1/t-weighted loss.

    With `block_rows` > 0 that fraction of the rows is masked block-causally, the canvas semi-autoregressive
    decoding shows the model (the training pattern of block diffusion, BD3-LM, arXiv 2503.09573): the response's
    first j blocks of `block_length` are clean, block j is masked with the row's ratio t, everything after it is
    masked, and the loss scores block j only (× 1/t, normalised by the block). j is uniform over the blocks that
    hold answer content (non-`eos_id`) and the block where the EOS tail starts. Uniform masking leaves later
    lines visible, and a worked solution repeats each result there ("so 396", then "396 + 78"): the model can
    copy a result from the future instead of computing it, which decoding from a blank block never allows.

    With `focus` [b, L] (the tokens a task computes, `tasks.computed`) and `focus_rows` > 0, that fraction of the
    rows masks only focus tokens, each with the row's ratio t, and scores them (× 1/t, normalised by the row's
    focus count): every other token stays visible. Under uniform masking a computed digit is scored mostly when
    its operands are masked too or a copy of it is visible; a focus row asks for exactly the computation. (The
    `--columns` probe of weights trained ~4,000 steps without focus rows: 11–15 % of units digits right, chance
    10 %; the model card has the curve with them.)

    With `focus_block_rows` > 0 that fraction of the focus rows is also block-causal: the response's blocks before
    a block j are clean, block j masks its focus tokens with the row's ratio t (its other tokens stay visible, as
    the confidence-ordered sampler commits layout and copies before the digits they feed), everything after block j
    is masked, and the loss is the mean cross-entropy of block j's masked focus tokens. j is uniform over the blocks
    holding focus tokens. (A block holds a few focus tokens: LLaDA's 1/t weight normalised by their count would give
    a lone masked token of a small-t row a weight of 1/(t·count), hundreds; the mean bounds every row's weight by
    one. The run that tried both logged the same loss spikes either way, as often as runs without these rows do:
    the mean is for the variance, not a measured fix.) A plain focus row leaves the future visible, decoding
    never does: with one column's two result digits masked and all else shown the v7 weights (step 9,200) got
    99.9 % of the columns of 100 held-out word problems right, with everything after the column masked too 98.8 %
    (`python -m polestar.train.evaluate --column-context`; the model card has the later weights).

    With `order_rows` > 0 that fraction of the rows (drawn last, so it overrides the other kinds) shows the canvas
    LLaDA's confidence-ordered sampler builds inside a block, written with the reference tokens: block j is chosen
    as for a block-causal row, the blocks before it are clean and everything after it masked, and of block j's
    positions a share u ~ U(0, 1) is unmasked in the order the model's own confidence ranks them (`_confidence_order`,
    `order_rounds` no-grad forwards, each unmasking its part of the share at the most confident masked positions).
    The loss is the mean cross-entropy of block j's still-masked positions. Why: the shipped weights compute a column
    right 99.8 % of the time with the text before it written, but the sampler writes most column digits after some
    token to their right; ranked by d2Cache's certainty prior instead (text next to written text first), the same
    weights solve 94 of 100 `arith` problems against 86. A digit the sampler would write before its inputs is one the
    model is sure of without them: these rows score it in exactly that canvas, where the reference digit can only be
    learnt from what is visible, and lower that confidence otherwise."""
    b = ids.shape[0]
    offset = torch.rand(1, generator=generator)
    t = eps + (1 - eps) * (torch.randperm(b, generator=generator).unsqueeze(1) + offset) / b
    # the noise is drawn on the CPU from the step's generator, so a run is the same on any device
    draws = torch.rand(ids.shape, generator=generator)
    resp = response.cpu()
    masked = resp & (draws < t)
    scored, weights = masked, (1.0 / t) / resp.sum(1, keepdim=True)
    if block_rows > 0:
        causal = (torch.rand(b, generator=generator) < block_rows).unsqueeze(1)
        first = _content_block_first(resp, ids.cpu(), eos_id, block_length, torch.rand(b, generator=generator))
        in_block, after = _block_masks(resp, first.unsqueeze(1), block_length)
        masked = torch.where(causal, (in_block & (draws < t)) | after, masked)
        scored = torch.where(causal, in_block & masked, masked)
        weights = torch.where(causal, (1.0 / t) / in_block.sum(1, keepdim=True).clamp(min=1), weights)
    if focus is not None and focus_rows > 0:
        focus = focus.cpu()
        on = (torch.rand(b, generator=generator) < focus_rows).unsqueeze(1) & focus.any(1, keepdim=True)
        masked = torch.where(on, focus & (draws < t), masked)
        scored = torch.where(on, masked, scored)
        weights = torch.where(on, (1.0 / t) / focus.sum(1, keepdim=True).clamp(min=1), weights)
        if focus_block_rows > 0:
            block = on & (torch.rand(b, generator=generator) < focus_block_rows).unsqueeze(1)
            in_block, after = _focus_block(resp, focus, block_length, torch.rand(b, generator=generator))
            computed = focus & in_block & (draws < t)
            masked = torch.where(block, computed | after, masked)
            scored = torch.where(block, computed, scored)
            weights = torch.where(block, 1.0 / computed.sum(1, keepdim=True).clamp(min=1), weights)
    if order_rows > 0:
        rows = (torch.rand(b, generator=generator) < order_rows).nonzero().flatten()
        u_block, u_share = torch.rand(b, generator=generator), torch.rand(b, generator=generator)
        if len(rows):
            first = _content_block_first(resp[rows], ids[rows].cpu(), eos_id, block_length, u_block[rows])
            in_block, after = _block_masks(resp[rows], first.unsqueeze(1), block_length)
            share = (u_share[rows] * in_block.sum(1)).long()
            left = _confidence_order(model, ids[rows], in_block, after, share, mask_id, order_rounds)
            masked, scored, weights = masked.clone(), scored.clone(), weights.clone()  # `scored` may be `masked`
            masked[rows], scored[rows] = left | after, left
            weights[rows] = 1.0 / left.sum(1, keepdim=True).clamp(min=1)
    masked, scored = masked.to(ids.device), scored.to(ids.device)
    noisy = ids.masked_fill(masked, mask_id)
    logits = model(noisy)
    ce = F.cross_entropy(logits[scored].float(), ids[scored], reduction="none")
    return (ce * weights.expand_as(ids).to(ids.device)[scored]).sum() / b


def _content_block_first(resp: torch.Tensor, ids: torch.Tensor, eos_id: int | None, block_length: int,
                         u: torch.Tensor) -> torch.Tensor:
    """First position [b] of block j of each row's response, j = ⌊u·(blocks of answer content + 1)⌋: uniform over
    the blocks holding answer content (non-`eos_id`) and the block where the EOS tail starts."""
    content = (resp & (ids != eos_id)).sum(1)
    return resp.float().argmax(1) + (u * (content // block_length + 1)).long() * block_length


@torch.no_grad()
def _confidence_order(model: Transformer, ids: torch.Tensor, in_block: torch.Tensor, after: torch.Tensor,
                      share: torch.Tensor, mask_id: int, rounds: int) -> torch.Tensor:
    """Block positions [b, L] bool still masked after unmasking `share` [b] of each row's `in_block` positions with
    their reference tokens, most confident first (the probability of the model's argmax, as LLaDA's sampler ranks
    them), in `rounds` forwards: round r unmasks up to ⌈share·r/rounds⌉ in all, ranked on that round's canvas."""
    left = in_block.clone()
    for r in range(1, rounds + 1):
        target = (share * r + rounds - 1) // rounds
        need = target - (in_block & ~left).sum(1)
        if not (need > 0).any():
            continue
        logits = model(ids.masked_fill((left | after).to(ids.device), mask_id))
        conf = logits.float().softmax(-1).amax(-1).cpu().masked_fill(~left, -1.0)
        order = conf.argsort(dim=1, descending=True, stable=True)  # the first `need` of each row are unmasked
        left &= ~torch.zeros_like(left).scatter_(1, order, torch.arange(conf.shape[1]) < need.unsqueeze(1))
    return left


def _focus_block(resp: torch.Tensor, focus: torch.Tensor, block_length: int, u: torch.Tensor):
    """Per row, block j of the response (blocks of `block_length` from its first position), j the
    ⌊u·count⌋-th of the blocks holding a focus token: (in_block, after) [b, L] bool masks of block j and of the
    response after it. A row without focus tokens gets its first block."""
    pos = torch.arange(resp.shape[1]).unsqueeze(0)
    start = resp.float().argmax(1, keepdim=True)
    index = ((pos - start).clamp(min=0) // block_length).expand_as(resp)
    holds = torch.zeros(resp.shape[0], resp.shape[1] // block_length + 1).scatter_add_(
        1, index, (focus & resp).float()) > 0  # [b, blocks]: block holds a focus token
    k = (u * holds.sum(1)).long().unsqueeze(1)  # which of them, 0-based
    j = (holds.long().cumsum(1) > k).float().argmax(1, keepdim=True)
    return _block_masks(resp, start + j * block_length, block_length)


def _block_masks(resp: torch.Tensor, first: torch.Tensor, block_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(in_block, after) [b, L]: the response positions of each row's block starting at `first` [b, 1], and those
    after it."""
    pos = torch.arange(resp.shape[1]).unsqueeze(0)
    return resp & (pos >= first) & (pos < first + block_length), resp & (pos >= first + block_length)
