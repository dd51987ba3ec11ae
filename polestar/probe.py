"""Analysis probe: a full forward over the canvas after each step (never counted in NFE or TPS) giving

- attention drift D_{i,ℓ}(t) = mean over heads of KL(A_{i,ℓ}(t) ‖ A_{i,ℓ}(t−1)) for every layer ℓ and position i
  (paper Eq. 4, the Fig 4 heatmap; A is the rotary attention distribution of position i over all keys);
- the last layer's value states of the generated region (Fig 3c's PCA trajectories).
The probe sees what a fresh full forward would: for cached methods it shows the drift the cache is exposed
to, independent of what the method chose to recompute.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from polestar.clustering import kl_drift


@dataclass
class ProbeFrame:
    drift: torch.Tensor  # [layers, length] float32 (zeros at the first probe)
    values: torch.Tensor  # [gen_length, kv_dim] float16: last-layer V of the generated region


class AttentionProbe:
    def __init__(self, model, prompt_len: int) -> None:
        self.model, self.prompt_len = model, prompt_len
        self.previous: list[torch.Tensor] | None = None

    @torch.no_grad()
    def __call__(self, canvas: torch.Tensor) -> ProbeFrame:
        model = self.model
        cache = model.new_cache(canvas.shape[0], canvas.shape[1])
        out = model.run(canvas, cache=cache, output_attentions=True)
        attns = [a[0].transpose(0, 1) for a in out.attentions]  # per layer [length, heads, length]
        if self.previous is None:
            drift = torch.zeros(len(attns), canvas.shape[1])
        else:
            drift = torch.stack([kl_drift(now, before) for now, before in zip(attns, self.previous)])
        self.previous = attns
        values = cache.v[-1, 0, :, self.prompt_len:].transpose(0, 1).reshape(canvas.shape[1] - self.prompt_len, -1)
        return ProbeFrame(drift=drift.float().cpu(), values=values.to(torch.float16).cpu())
