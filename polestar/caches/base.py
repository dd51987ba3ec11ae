"""What every cache policy shares: the `Pass` record, the per-step `StepView`, and row-forward helpers."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch

from polestar.config import DecodeConfig
from polestar.kinds import PassKind
from polestar.models.cache import KVCache


@dataclass
class ExtraTargets:
    """Fresh predictions a cache policy offers for positions outside the commit window (Polestar's suffix
    logits from a refresh); the loop commits them with the extra-target rule (`policies.commit`)."""

    positions: torch.Tensor  # [m] canvas positions, still masked
    logits: torch.Tensor  # [batch, m, vocab]: row i predicts positions[i] (aligned)


@dataclass
class Pass:
    """One forward of the loop (one NFE)."""

    logits: torch.Tensor  # [batch, n_targets, vocab]: row i predicts target position i (aligned)
    kind: PassKind
    rows: int  # query rows pushed through the first layer
    refreshed_positions: torch.Tensor | None = None  # positions recomputed beyond the step's own queries
    refreshed_layers: list[int] = field(default_factory=list)  # layers where that extra recompute happened
    # per-target signals [batch, n_targets] that a commit rule may read, by name (Polestar: "drift", "delta")
    signals: dict[str, torch.Tensor] = field(default_factory=dict)
    extra_targets: ExtraTargets | None = None
    extra: dict = field(default_factory=dict)  # per-method trace columns


@dataclass
class StepView:
    """What a cache policy may read about the current step (the loop owns and updates it)."""

    canvas: torch.Tensor  # [batch, length]
    prompt_len: int
    block: int
    block_start: int
    block_end: int
    step: int  # index within the block; 0 is the block's first forward
    targets: torch.Tensor  # [n] positions the loop needs predictions for (masked in at least one row)
    pad: torch.Tensor | None = None  # [batch] left padding per row (batch > 1 with prompts of different lengths)


class CachePolicy(ABC):
    """Base: subclasses implement `forward`; `begin_block` and `observe` default to no-ops.

    `batchable`: the policy decodes a batch of rows (`decode_batch`) with each row as it would be alone. A policy
    that keeps per-row state (drift, staleness, selections) or reads row 0 only leaves it False."""

    batchable = False

    def __init__(self, model, cfg: DecodeConfig) -> None:
        self.model, self.cfg = model, cfg
        self.cache: KVCache | None = None
        self.traced = False  # set by the loop: when False, work whose only reader is the trace may be skipped

    def begin_block(self, view: StepView) -> None:
        pass

    @abstractmethod
    def forward(self, view: StepView) -> Pass:
        """Run this step's forward (one NFE) and return the logits predicting `view.targets`."""

    def observe(self, view: StepView, logits: torch.Tensor, committed: torch.Tensor) -> None:
        """After the loop committed `committed` [n_targets] bool (aligned with `view.targets` and `logits`)."""

    # --- helpers ------------------------------------------------------------------------------------
    def ensure_cache(self, canvas: torch.Tensor) -> KVCache:
        if self.cache is None or self.cache.length != canvas.shape[1]:
            self.cache = self.model.new_cache(canvas.shape[0], canvas.shape[1])
        return self.cache

    def full_pass(self, view: StepView, **outputs) -> tuple[Pass, object]:
        """Full-canvas forward writing every layer's K/V into the cache."""
        out = self.model.run(view.canvas, cache=self.ensure_cache(view.canvas), pad=view.pad, **outputs)
        return Pass(logits=out.logits[:, view.targets], kind=PassKind.FULL, rows=view.canvas.shape[1]), out

    def with_predictors(self, positions: torch.Tensor) -> torch.Tensor:
        """Sorted union of `positions` and the rows whose outputs predict them (Dream: one to the left)."""
        return torch.unique(torch.cat([positions, self.model.predicting_rows(positions)]))

    def predict(self, hidden: torch.Tensor, rows: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Logits for `targets` from final hidden states `hidden` [batch, len(rows), d] of sorted `rows`."""
        index = torch.searchsorted(rows, self.model.predicting_rows(targets))
        return self.model.head(hidden[:, index])

    def row_union(self, view: StepView, rows_of) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The rows a partial forward pushes through, `rows_of(targets)` of each batch row's own targets (those
        still masked in it), united; and `keep` [batch, n]: True where a row alone would not have recomputed
        that position, so its cache entry stays (None when every row has the same rows, always in batch 1)."""
        if view.canvas.shape[0] == 1:
            return rows_of(view.targets), None
        masked = view.canvas[:, view.targets] == self.model.mask_id
        own = [rows_of(view.targets[m]) for m in masked]
        union = torch.unique(torch.cat(own))
        keep = torch.stack([~torch.isin(union, rows) for rows in own])
        return union, (keep if bool(keep.any()) else None)

    def forward_rows(self, canvas: torch.Tensor, rows: torch.Tensor, need_attn: bool = False,
                     pad: torch.Tensor | None = None, keep: torch.Tensor | None = None):
        """Push `rows` through every layer against the cache (their K/V rows overwritten, except where `keep`);
        returns the final hidden states [batch, len(rows), d] and, on request, each layer's attention
        [batch, H, len(rows), L]. `pad`: left padding per row (batch > 1)."""
        h = self.model.embed(canvas[:, rows])
        attns = []
        for index in range(self.model.spec.n_layers):
            out = self.model.layer(index, h, rows, self.cache, need_attn=need_attn, pad=pad, keep=keep)
            h = out.hidden
            if need_attn:
                attns.append(out.attn)
        return h, attns
