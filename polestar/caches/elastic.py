"""Elastic-Cache (arXiv 2510.14973; docs/baselines.md §2.7): attention-aware drift test on the most-attended
tokens, layer-wise refresh from the first drifting layer, sliding commit window (`commit_window` in the config).

State: the layer inputs X_l of every position (from the last full pass) and, per layer, the tracked tokens
(the `elastic_track` keys the window's queries attend to most, among committed positions).
A step pushes queries = tracked ∪ committed last step ∪ window targets through the layers in reuse mode
(their K/V rows overwritten, attention over the cached K/V). At each layer the tracked tokens' attention is
compared with what it was before this step (queries from their cached inputs against the cached keys);
if the cosine similarity, averaged over heads, falls below γ, every later layer is recomputed for all
positions from its cached inputs (with this step's rows updated), which rewrites those layers' K/V.
The first pass of the decode is a full forward; there is no block-entry refresh.
"""

from __future__ import annotations

import torch

from polestar.caches.base import CachePolicy, Pass, StepView
from polestar.kinds import PassKind


class ElasticCache(CachePolicy):
    def __init__(self, model, cfg) -> None:
        super().__init__(model, cfg)
        self.inputs: list[torch.Tensor] = []  # X_l [batch, length, d] per layer
        self.track: list[torch.Tensor] = []  # per layer, tracked positions [t]
        self.new = torch.empty(0, dtype=torch.long)

    def forward(self, view: StepView) -> Pass:
        if not self.inputs:
            result, out = self.full_pass(view, output_hidden_states=True, output_attentions=True)
            self.inputs = [h.clone() for h in out.hidden_states[:-1]]
            self._update_track(view, [a[:, :, view.targets] for a in out.attentions])
            return result
        return self._reuse_step(view)

    def _reuse_step(self, view: StepView) -> Pass:
        model, device = self.model, view.canvas.device
        track = torch.unique(torch.cat(self.track)) if self.track else torch.empty(0, dtype=torch.long)
        rows = self.with_predictors(torch.unique(torch.cat([track, self.new.to(device), view.targets])))
        h = model.embed(view.canvas[:, rows])
        window_attn, refreshed_from = [], None
        n_layers = model.spec.n_layers
        for index in range(n_layers):
            tracked = self.track[index]
            before = model.attention_probs(index, self.inputs[index][:, tracked], tracked, self.cache)
            self.inputs[index][:, rows] = h
            out = model.layer(index, h, rows, self.cache, need_attn=True)
            now = out.attn[:, :, torch.searchsorted(rows, tracked)]
            window_attn.append(out.attn[:, :, torch.searchsorted(rows, view.targets)])
            h = out.hidden
            similarity = torch.nn.functional.cosine_similarity(before, now, dim=-1).mean()
            if index + 1 < n_layers and bool(similarity < self.cfg.elastic_gamma):
                refreshed_from = index + 1
                break
        if refreshed_from is None:
            logits = self.predict(h, rows, view.targets)
            self._update_track(view, window_attn)
            return Pass(logits=logits, kind=PassKind.REUSE, rows=len(rows))
        self.inputs[refreshed_from][:, rows] = h
        all_rows = torch.arange(view.canvas.shape[1], device=device)
        full_h = self.inputs[refreshed_from].clone()
        for index in range(refreshed_from, n_layers):
            self.inputs[index] = full_h.clone()
            out = model.layer(index, full_h, all_rows, self.cache)  # fused attention: no [L, L] probabilities
            # only the window's query rows are tracked: their probabilities over the keys just written
            window_attn.append(model.attention_probs(index, self.inputs[index][:, view.targets], view.targets,
                                                     self.cache))
            full_h = out.hidden
        self._update_track(view, window_attn)
        logits = model.head(full_h[:, model.predicting_rows(view.targets)])
        refreshed = all_rows[~torch.isin(all_rows, rows)]
        return Pass(logits=logits, kind=PassKind.PARTIAL_REFRESH, rows=len(rows), refreshed_positions=refreshed,
                    refreshed_layers=list(range(refreshed_from, n_layers)))

    def _update_track(self, view: StepView, window_attn: list[torch.Tensor]) -> None:
        """Per layer: the committed keys receiving the most attention mass from the window's queries."""
        masked = view.canvas[0] == self.model.mask_id
        k = self.cfg.elastic_track
        self.track = []
        for attn in window_attn:
            mass = attn.sum(dim=(0, 1, 2)).masked_fill(masked, float("-inf"))
            self.track.append(mass.topk(min(k, int((~masked).sum()))).indices.sort().values)

    def observe(self, view: StepView, logits: torch.Tensor, committed: torch.Tensor) -> None:
        self.new = view.targets[committed]
