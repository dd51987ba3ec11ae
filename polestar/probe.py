"""Analysis probe: a full forward over the canvas after each step (never counted in NFE or TPS) giving

- attention drift D_{i,ℓ}(t) = mean over heads of KL(A_{i,ℓ}(t) ‖ A_{i,ℓ}(t−1)) for every layer ℓ and
  generated position i (paper Eq. 4, the Fig 4 heatmap; A is the rotary attention distribution of position i over
  all keys);
- the last layer's value states of the generated region (Fig 3c's PCA trajectories).
The probe sees what a fresh full forward would: for cached methods it shows the drift the cache is exposed
to, independent of what the method chose to recompute. Its forward also serves as the staleness reference of
the next step (`reference`): the canvas a step's forward sees is the canvas the previous step's probe saw.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.proxy_kl import PROB_FLOOR


@dataclass
class ProbeFrame:
    drift: torch.Tensor  # [layers, gen_length] float32 (zeros at the first probe)
    values: torch.Tensor  # [gen_length, kv_dim] float16: last-layer V of the generated region


class AttentionProbe:
    """Call it with each step's canvas. It keeps the previous step's clamped attention and its logarithm per
    layer (generated rows only), so each KL costs one logarithm per step, not two: the same numbers as
    `polestar.clustering.kl_drift` (both distributions clamped at PROB_FLOOR)."""

    def __init__(self, model, prompt_len: int) -> None:
        self.model, self.prompt_len = model, prompt_len
        self.previous: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # per layer (p, log p) [H, G, L]
        self._canvas: torch.Tensor | None = None
        self._cache = None

    @torch.no_grad()
    def __call__(self, canvas: torch.Tensor) -> ProbeFrame:
        model = self.model
        cache = model.new_cache(canvas.shape[0], canvas.shape[1])
        positions = torch.arange(canvas.shape[1], device=canvas.device)
        h, attentions = model.embed(canvas), []
        for index in range(model.spec.n_layers):  # `model.run` without the LM head: the probe reads no logits
            out = model.layer(index, h, positions, cache, need_attn=True)
            h = out.hidden
            attentions.append(out.attn)
        # per layer [gen, heads, length]: the generated rows' distributions, clamped, and their logarithms
        # [heads, G, L] as the layer returns it (a transposed copy cost ~4 ms a step); KL over keys, mean over heads
        now = [a[0, :, self.prompt_len:].float().clamp_min(PROB_FLOOR) for a in attentions]
        now = [(p, p.log()) for p in now]
        if self.previous is None:
            drift = torch.zeros(len(now), canvas.shape[1] - self.prompt_len)
        else:
            drift = torch.stack([(p * (log_p - log_q)).sum(-1).clamp_min(0).mean(0)
                                 for (p, log_p), (_, log_q) in zip(now, self.previous)])
        self.previous = now
        self._canvas, self._cache = canvas.clone(), cache
        values = cache.v[-1, 0, :, self.prompt_len:].transpose(0, 1).reshape(canvas.shape[1] - self.prompt_len, -1)
        return ProbeFrame(drift=drift.float().cpu(), values=values.to(torch.float16).cpu())

    def reference(self, canvas: torch.Tensor):
        """The K/V cache of the probe's last full forward if it ran over exactly `canvas`, else None: pass it as
        `generate(..., reference=probe.reference)` and the staleness probe reuses it instead of a second forward."""
        if self._canvas is not None and self._canvas.shape == canvas.shape and torch.equal(self._canvas, canvas):
            return self._cache
        return None
