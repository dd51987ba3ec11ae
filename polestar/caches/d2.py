"""d2Cache (arXiv 2509.23094; docs/baselines.md §2.8) and EntropyCache (arXiv 2603.18489, reconstructed).

d2Cache: after a first full forward, each step pushes only a query set through every layer (their K/V rows
overwritten, attention over all cached K/V), accumulating an attention rollout. The next query set is:
(a) the `d2_k` best masked candidates from the current block start up to the block boundary that covers
`d2_k` masks, scored by their last confidence × certainty density, the current block first; (b) the
positions committed this step; (c) the rollout nucleus: the most important positions (column sums of the
rollout) up to mass `d2_rollout_p`, at least one. No block-entry refresh.

EntropyCache (no public code; reconstructed from the paper's abstract, labelled so everywhere): on a skip
step the query set is the commit targets ∪ the last `entropy_k` decoded positions ∪ the tokens decoded last
step; when a token committed last step had predictive entropy > `entropy_tau` nats, the next step is a full
forward that refreshes every K/V row.
"""

from __future__ import annotations

from collections import deque

import torch

from polestar.caches.base import CachePolicy, Pass, StepView
from polestar.kinds import PassKind
from polestar.policies.sampling import certainty_density, entropy


class D2Cache(CachePolicy):
    def __init__(self, model, cfg) -> None:
        super().__init__(model, cfg)
        self.confidence: torch.Tensor | None = None  # [length] last known confidence of each position
        self.importance: torch.Tensor | None = None  # [length] rollout column sums
        self.queries: torch.Tensor | None = None

    def forward(self, view: StepView) -> Pass:
        model, canvas = self.model, view.canvas
        length = canvas.shape[1]
        if self.queries is None:
            self.ensure_cache(canvas)
            out = model.run(canvas, cache=self.cache, output_attentions=True)
            self.confidence = out.logits[0].double().softmax(-1).amax(-1)
            self._rollout(torch.arange(length, device=canvas.device), out.attentions)
            return Pass(logits=out.logits[:, view.targets], kind=PassKind.FULL, rows=length)
        rows = self.with_predictors(torch.unique(torch.cat([self.queries, view.targets])))
        hidden, attns = self.forward_rows(canvas, rows, need_attn=True)
        self._rollout(rows, attns)
        masked = rows[canvas[0, rows] == model.mask_id]
        logits = self.predict(hidden, rows, masked)
        self.confidence[masked] = logits[0].double().softmax(-1).amax(-1)
        index = torch.searchsorted(masked, view.targets)
        return Pass(logits=logits[:, index], kind=PassKind.QUERY, rows=len(rows))

    def _rollout(self, rows: torch.Tensor, attns: list[torch.Tensor]) -> None:
        """Attention rollout over layers; rows not queried this step keep the identity. fp32: the rollout only
        ranks positions, and fp64 made it a third of a d2Cache step on the embedded model."""
        length = self.cache.length
        eye = torch.eye(length, dtype=torch.float32, device=rows.device)
        rollout = eye.clone()
        for attn in attns:
            a = eye.clone()
            a[rows] = attn[0].float().mean(0)
            a = a + eye
            a = a / a.sum(-1, keepdim=True)
            rollout = a @ rollout
        self.importance = rollout.sum(0)

    def observe(self, view: StepView, logits: torch.Tensor, committed: torch.Tensor) -> None:
        canvas, mask_id = view.canvas[0], self.model.mask_id
        device, p = canvas.device, view.prompt_len
        new = view.targets[committed]
        masked = (canvas == mask_id).nonzero().flatten()
        masked = masked[masked >= view.block_start]
        candidates = masked
        if len(masked) > self.cfg.d2_k:
            boundary = int(masked[self.cfg.d2_k - 1])
            block = self.cfg.block_length
            end = p + ((boundary - p) // block + 1) * block
            candidates = masked[masked < end]
        score = self.confidence[candidates]
        if self.cfg.d2_prior_sigma > 0:
            decoded = (canvas[p:] != mask_id).unsqueeze(0)
            score = score * certainty_density(decoded, self.cfg.d2_prior_sigma)[0, candidates - p]
        score = score + (candidates < view.block_end).double() * (score.max() if len(score) else 0)
        top = candidates[score.topk(min(self.cfg.d2_k, len(candidates))).indices]
        chosen = torch.unique(torch.cat([top, new]))
        importance = self.importance.double()
        importance[chosen] = float("-inf")
        total = self.importance.double().sum()
        order = importance.argsort(descending=True)
        mass = (self.importance.double()[order] / total).cumsum(0)
        n_nucleus = max(1, int((mass <= self.cfg.d2_rollout_p).sum()))
        nucleus = order[:n_nucleus]
        nucleus = nucleus[torch.isfinite(importance[nucleus])]
        self.queries = torch.unique(torch.cat([chosen, nucleus])).to(device)


class EntropyCache(CachePolicy):
    def __init__(self, model, cfg) -> None:
        super().__init__(model, cfg)
        self.recent: deque[int] = deque(maxlen=max(1, cfg.entropy_k))
        self.last: torch.Tensor | None = None
        self.refresh = True

    def forward(self, view: StepView) -> Pass:
        if self.refresh:
            self.refresh = False
            return self.full_pass(view)[0]
        keep = torch.tensor(list(self.recent)[-self.cfg.entropy_k:] if self.cfg.entropy_k else [],
                            dtype=torch.long, device=view.canvas.device)
        rows = self.with_predictors(torch.unique(torch.cat([view.targets, keep, self.last])))
        hidden, _ = self.forward_rows(view.canvas, rows)
        return Pass(logits=self.predict(hidden, rows, view.targets), kind=PassKind.QUERY, rows=len(rows))

    def observe(self, view: StepView, logits: torch.Tensor, committed: torch.Tensor) -> None:
        self.last = view.targets[committed]
        self.recent.extend(self.last.tolist())
        if committed.any():
            self.refresh = bool(entropy(logits[0, committed]).max() > self.cfg.entropy_tau)
