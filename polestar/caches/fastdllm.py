"""No cache, and Fast-dLLM's prefix and dual caches (docs/baselines.md §2.2–2.3).

- NoCache: a full-canvas forward every step (LLaDA's sampler).
- PrefixCache: full forward at block entry; later steps recompute the current block and everything after
  it, attending to the frozen prefix K/V.
- DualCache: full forward at block entry; later steps recompute only the current block (its K/V rows
  overwritten), attending to the frozen prefix and suffix K/V. The loop runs while the block has masks.
`fastdllm_refresh_interval` k > 0 forces a full forward every k steps inside a block (k = 1: always fresh).
"""

from __future__ import annotations

from abc import abstractmethod

import torch

from polestar import profiling
from polestar.caches.base import CachePolicy, Pass, StepView
from polestar.kinds import PassKind


class NoCache(CachePolicy):
    batchable = True

    def forward(self, view: StepView) -> Pass:
        out = self.model.run(view.canvas, pad=view.pad)
        return Pass(logits=out.logits[:, view.targets], kind=PassKind.FULL, rows=view.canvas.shape[1])


class _EntryCache(CachePolicy):
    """Full forward at block entry (and every `fastdllm_refresh_interval` steps); a partial forward otherwise."""

    batchable = True

    def _full_now(self, view: StepView) -> bool:
        k = self.cfg.fastdllm_refresh_interval
        return self.cache is None or view.step == 0 or (k > 0 and view.step % k == 0)

    def begin_block(self, view: StepView) -> None:
        self.ensure_cache(view.canvas)

    @abstractmethod
    def rows(self, view: StepView, targets: torch.Tensor) -> torch.Tensor:
        """Sorted positions a partial forward recomputes for a row whose masked targets are `targets`."""

    def forward(self, view: StepView) -> Pass:
        if self._full_now(view):
            with profiling.section("entry: forward" if view.step == 0 else "step: full refresh"):
                return self.full_pass(view)[0]
        rows, keep = self.row_union(view, lambda targets: self.rows(view, targets))
        with profiling.section("step: block layer"):  # the sections Polestar's step breakdown names alike
            hidden, _ = self.forward_rows(view.canvas, rows, pad=view.pad, keep=keep)
        with profiling.section("step: head"):
            return Pass(logits=self.predict(hidden, rows, view.targets), kind=self.partial_kind, rows=len(rows))


class PrefixCache(_EntryCache):
    partial_kind = PassKind.PREFIX

    def rows(self, view: StepView, targets: torch.Tensor) -> torch.Tensor:
        start = int(self.with_predictors(targets).min()) if len(targets) else view.block_start
        start = min(start, view.block_start)
        return torch.arange(start, view.canvas.shape[1], device=view.canvas.device)


class DualCache(_EntryCache):
    partial_kind = PassKind.BLOCK

    def rows(self, view: StepView, targets: torch.Tensor) -> torch.Tensor:
        block = torch.arange(view.block_start, view.block_end, device=view.canvas.device)
        return self.with_predictors(torch.cat([block, targets]))
