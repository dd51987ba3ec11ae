"""What the paper's motivating figures measure, collected from one decode loop run (no second loop).

A `DriftRecorder` is the decode's `on_step` callback (its time is excluded from the wall time and NFE). After each
step it runs one fresh full forward over the canvas (never counted) and keeps, for every layer ℓ and canvas
position i:
- `staleness` E_i(t, ℓ): the cache policy's K/V against that fresh recompute (`polestar.staleness`, paper §C.2);
- `kl_step`: the attention drift D_{i,ℓ}(t) = mean over heads of KL(A_i(t) ‖ A_i(t−1)) of fresh rotary
  attention (paper Eq. 4; Fig 4 and Fig 8);
- `kl_entry`: the same KL against the attention at the current block's entry, when the cache entry was written;
- `cos_attended`: Elastic-Cache's signal, 1 − cos of the layer input of position i's most-attended token
  (attention at block entry) now against at block entry;
- `entropy`: of the fresh prediction at i (the uncertainty signal);
and per step the committed positions. Every signal comes from the same fresh forward, so the figures compare
kinds of signal, not the cheap proxies a method computes (Polestar's proxy is `polestar.clustering`).

Decodes use a Fast-dLLM dual cache by default: every position outside the block is cached at block entry and goes
stale until the next entry, the trajectory of the paper's §3 analyses (Eq. 3).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from polestar.clustering import kl_drift
from polestar.staleness import kv_staleness


@dataclass
class StepRecord:
    block: int
    step: int  # index within the block (0 = the block's entry forward)
    block_start: int
    block_end: int
    committed: list[int]  # canvas positions committed by this step
    staleness: torch.Tensor  # [layers, length]
    kl_step: torch.Tensor | None  # [layers, length] (None at the first step)
    kl_entry: torch.Tensor | None  # [layers, length] (None at a block's entry step)
    cos_attended: torch.Tensor | None  # [layers, length] (None at a block's entry step)
    entropy: torch.Tensor  # [length]
    prediction: torch.Tensor  # [length] argmax of the fresh logits
    values: torch.Tensor  # [gen_length, kv_dim] last layer's fresh V of the generated region (PCA)


@dataclass
class DriftRecorder:
    """`on_step` callback of `polestar.decode`; pass the same `cache_policy` to the decode."""

    model: object
    cache_policy: object
    prompt_len: int
    records: list[StepRecord] = field(default_factory=list)
    _previous: list[torch.Tensor] | None = None
    _entry: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None

    @torch.no_grad()
    def __call__(self, event, canvas: torch.Tensor) -> bool:
        model = self.model
        reference = model.new_cache(canvas.shape[0], canvas.shape[1])
        out = model.run(canvas, cache=reference, output_attentions=True, output_hidden_states=True)
        attns = [a[0].transpose(0, 1) for a in out.attentions]  # per layer [length, heads, length]
        hidden = [h[0] for h in out.hidden_states[:-1]]  # input of each layer [length, d]
        staleness = kv_staleness(model, canvas, self.cache_policy.cache, reference)
        kl_step = None if self._previous is None else torch.stack(
            [kl_drift(now, before) for now, before in zip(attns, self._previous)])
        if event.step == 0:
            self._entry = (attns, hidden)
            kl_entry = cos_attended = None
        else:
            entry_attn, entry_hidden = self._entry
            kl_entry = torch.stack([kl_drift(now, before) for now, before in zip(attns, entry_attn)])
            cos_attended = torch.stack([_attended_change(a, h_then, h_now)
                                        for a, h_then, h_now in zip(entry_attn, entry_hidden, hidden)])
        self._previous = attns
        logits = out.logits[0].double()
        logp = logits.log_softmax(-1)
        block_length = self.cache_policy.cfg.block_length
        start = self.prompt_len + event.block * block_length
        self.records.append(StepRecord(
            block=event.block, step=event.step, block_start=start, block_end=start + block_length,
            committed=[c.position for c in event.commits], staleness=staleness.float().cpu(),
            kl_step=None if kl_step is None else kl_step.float().cpu(),
            kl_entry=None if kl_entry is None else kl_entry.float().cpu(),
            cos_attended=None if cos_attended is None else cos_attended.float().cpu(),
            entropy=(-(logp.exp() * logp).sum(-1)).float().cpu(), prediction=logits.argmax(-1).cpu(),
            values=reference.v[-1, 0, :, self.prompt_len:].transpose(0, 1).reshape(
                canvas.shape[1] - self.prompt_len, -1).float().cpu(),
        ))
        return False


def _attended_change(attn: torch.Tensor, h_then: torch.Tensor, h_now: torch.Tensor) -> torch.Tensor:
    """1 − cos(h_now[j*], h_then[j*]) with j* each query row's most-attended key (head mean of `attn`)."""
    top = attn.mean(1).argmax(-1)  # [length]
    return 1 - torch.nn.functional.cosine_similarity(h_now[top].float(), h_then[top].float(), dim=-1)


_MEMO: dict[tuple, tuple[DriftRecorder, object]] = {}  # recordings of this process (`analysis.drift_figures`)


def record(model, prompt: str, method: str = "fast-dllm", **overrides) -> tuple[DriftRecorder, object]:
    """Decode `prompt` with a preset (fields overridden) and a recorder; returns (recorder, DecodeResult). The last
    recordings are kept in this process, so the figure scripts run together decode each example once."""
    key = (id(model), prompt, method, tuple(sorted(overrides.items())))
    if key not in _MEMO:
        if len(_MEMO) >= 64:
            _MEMO.pop(next(iter(_MEMO)))
        _MEMO[key] = _record(model, prompt, method, **overrides)
    return _MEMO[key]


def _record(model, prompt: str, method: str, **overrides) -> tuple[DriftRecorder, object]:
    from polestar.api import encode_prompt
    from polestar.caches import make_cache_policy
    from polestar.config import resolve
    from polestar.decode import decode

    cfg = resolve(method, measure_staleness=False, **overrides)
    ids = encode_prompt(model, prompt)
    policy = make_cache_policy(cfg, model)
    recorder = DriftRecorder(model, policy, ids.shape[1])
    out = decode(model, ids, cfg, on_step=recorder, cache_policy=policy)
    return recorder, out


def window(rec: StepRecord, cfg, length: int) -> torch.Tensor:
    """Polestar's local window outside the current block: `polestar_window_prefix` blocks before it and
    `polestar_window_suffix` after it (docs/algorithm.md §1), clipped to the canvas."""
    before = torch.arange(max(0, rec.block_start - cfg.polestar_window_prefix * cfg.block_length), rec.block_start)
    after = torch.arange(rec.block_end, min(length, rec.block_end + cfg.polestar_window_suffix * cfg.block_length))
    return torch.cat([before, after])
