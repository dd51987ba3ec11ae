"""The decode loop: the only block/step loop in the project. Every method is a cache policy × a commit rule.

Terms (LLaDA arXiv 2502.09992, Fast-dLLM arXiv 2505.22618, Polestar arXiv 2607.14107):
- canvas: prompt (P tokens) + G = gen_length positions initialised to the mask token;
- block b: positions [P + bB, P + (b+1)B), decoded left to right (semi-autoregressive);
- step: one forward while block b still has masks (the loop never stops at the first EOS: the whole
  fixed-length trajectory runs, as the paper measures). A block fully committed before its turn is
  skipped with 0 NFE;
- NFE: number of forwards. TPF = non-EOS tokens of the final generated region / NFE; tokens per step =
  all committed tokens / NFE; TPS = non-EOS tokens / decode wall time (device synchronised).
Per step: the commit window gives the target positions (the block's masks, or the first W masked positions
with a sliding window); the cache policy runs one forward and returns logits for them; proposals and
confidences follow; the commit rule picks positions; the loop writes them into the canvas.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

import torch

from polestar import profiling
from polestar.caches import make_cache_policy
from polestar.caches.base import StepView
from polestar.config import CommitRule, DecodeConfig
from polestar.errors import ConfigError
from polestar.policies.commit import make_commit_policy
from polestar.policies.sampling import certainty_density, propose
from polestar.reference import planned_commits
from polestar.staleness import kv_staleness
from polestar.trace import Commit, StepEvent, Trace

log = logging.getLogger(__name__)
REFRESH_KINDS = ("refresh", "partial-refresh")  # pass kinds that recompute stale cache entries


@dataclass(frozen=True)
class DecodeCounters:
    """What the policies did in one decode, counted without a trace (one host sync at the end)."""

    refresh_steps: int  # forwards that refreshed stale cache entries (Polestar's "refresh", Elastic's partial)
    drift_commits: int  # current-block commits made by the drift rule (Polestar-Commit)
    suffix_commits: int  # positions beyond the block committed from refreshed suffix logits
    suffix_eos_commits: int  # the subset of suffix commits that wrote EOS
    forced_commits: int  # commits made only by the progress guarantee (no position passed the rule)

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass
class DecodeResult:
    canvas: torch.Tensor  # [batch, prompt_len + gen_length]
    prompt_len: int
    nfe: int
    committed: int  # tokens committed (= gen_length)
    content_tokens: int  # non-EOS tokens in the generated region
    wall_s: float
    trace: Trace | None
    counters: DecodeCounters

    @property
    def token_ids(self) -> torch.Tensor:
        return self.canvas[0, self.prompt_len:]

    @property
    def tpf(self) -> float:
        return self.content_tokens / self.nfe if self.nfe else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.committed / self.nfe if self.nfe else 0.0

    @property
    def tps(self) -> float:
        return self.content_tokens / self.wall_s if self.wall_s > 0 else 0.0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def decode(
    model,
    prompt_ids: torch.Tensor,
    cfg: DecodeConfig,
    trace: bool = False,
    on_step: Callable[[StepEvent, torch.Tensor], bool | None] | None = None,
) -> DecodeResult:
    """Decode `prompt_ids` [1, P] with `cfg`. `on_step(event, canvas)` is called after every step when given
    (it implies tracing; its own time is excluded from the wall time); returning True stops the decode."""
    if prompt_ids.dim() != 2 or prompt_ids.shape[0] != 1:
        raise ConfigError(f"prompt_ids must have shape [1, prompt_len] (batch 1), got {list(prompt_ids.shape)}")
    prompt_len = prompt_ids.shape[1]
    if prompt_len == 0:
        raise ConfigError("the prompt is empty: give at least one token")
    length = prompt_len + cfg.gen_length
    if length > model.spec.max_seq_len:
        raise ConfigError(
            f"prompt ({prompt_len}) + gen_length ({cfg.gen_length}) = {length} exceeds the model's maximum "
            f"sequence length {model.spec.max_seq_len}: shorten the prompt or lower gen_length"
        )
    device, mask_id = prompt_ids.device, model.mask_id
    trace = trace or on_step is not None
    masks = torch.full((1, cfg.gen_length), mask_id, dtype=prompt_ids.dtype, device=device)
    canvas = torch.cat([prompt_ids, masks], dim=1)
    generator = torch.Generator(device=device).manual_seed(cfg.seed) if cfg.temperature > 0 else None
    cache_policy = make_cache_policy(cfg, model)
    cache_policy.traced = trace
    commit_policy = make_commit_policy(cfg)
    steps_per_block = cfg.total_steps // cfg.n_blocks
    record = Trace(prompt_len, cfg.gen_length, cfg.block_length) if trace else None
    nfe, stop, excluded, refresh_steps = 0, False, 0.0, 0
    # [drift, suffix, suffix EOS, forced] summed on the device: no host sync per step for the counters
    counts = torch.zeros(4, dtype=torch.long, device=device)
    _sync(device)
    t_start = time.perf_counter()

    for block in range(cfg.n_blocks):
        start = prompt_len + block * cfg.block_length
        end = start + cfg.block_length
        n_masked = int((canvas[0, start:end] == mask_id).sum())
        if n_masked == 0:
            continue
        plan = planned_commits(n_masked, steps_per_block) if cfg.commit == CommitRule.QUOTA else []
        view = StepView(canvas, prompt_len, block, start, end, 0, _targets(canvas, start, end, cfg, mask_id))
        cache_policy.begin_block(view)
        while n_masked > 0 and not stop:
            t_step = time.perf_counter()
            view.targets = _targets(canvas, start, end, cfg, mask_id)
            with profiling.section("forward (cache policy)"):
                result = cache_policy.forward(view)
            nfe += 1
            staleness = None
            if cfg.measure_staleness and cache_policy.cache is not None:
                t_measure = time.perf_counter()
                staleness = kv_staleness(model, canvas, cache_policy.cache)
                excluded += time.perf_counter() - t_measure
            with profiling.section("propose + commit"):
                tokens, confidence = propose(result.logits, cfg.temperature, generator, mask_id)
                rank = confidence
                if cfg.prior_sigma > 0:
                    decoded = canvas[:, prompt_len:] != mask_id
                    rank = confidence * certainty_density(decoded, cfg.prior_sigma)[:, view.targets - prompt_len]
                k = plan[view.step] if view.step < len(plan) else 1
                commit = commit_policy.select(confidence, rank, k, result.delta)
                chosen = commit.mask[0]
                canvas[0, view.targets[chosen]] = tokens[0, chosen]
                suffix = _suffix_commits(result, cfg, generator, mask_id, canvas)
                refresh_steps += result.kind in REFRESH_KINDS
                counts += _step_counts(commit, suffix, model.eos_id, device)
                cache_policy.observe(view, result.logits, chosen)
                n_masked = int((canvas[0, start:end] == mask_id).sum())
            if record is not None:
                _sync(device)
                event = _event(view, result, nfe, tokens, confidence, commit, cfg, t_step, suffix, commit_policy)
                if staleness is not None:
                    event.extra["staleness"] = staleness.tolist()
                record.events.append(event)
                if on_step is not None:
                    t_callback = time.perf_counter()
                    stop = bool(on_step(event, canvas))
                    excluded += time.perf_counter() - t_callback
            view.step += 1
        if stop:
            break

    _sync(device)
    wall = time.perf_counter() - t_start - excluded
    generated = canvas[0, prompt_len:]
    drift, suffix_n, suffix_eos, forced = counts.tolist()
    return DecodeResult(
        canvas=canvas,
        prompt_len=prompt_len,
        nfe=nfe,
        committed=int((generated != mask_id).sum()),
        content_tokens=int(((generated != mask_id) & (generated != model.eos_id)).sum()),
        wall_s=wall,
        trace=record,
        counters=DecodeCounters(refresh_steps, drift, suffix_n, suffix_eos, forced),
    )


def _step_counts(commit, suffix, eos_id: int, device: torch.device) -> torch.Tensor:
    """This step's [drift commits, suffix commits, suffix EOS commits, forced commits] as a device tensor."""
    zero = torch.zeros((), dtype=torch.long, device=device)
    drift = zero if commit.drift is None else commit.drift.sum()
    suffix_n = zero if suffix is None else torch.tensor(len(suffix[0]), device=device)
    suffix_eos = zero if suffix is None else (suffix[1] == eos_id).sum()
    return torch.stack([drift, suffix_n, suffix_eos, commit.forced.sum()])


def _targets(canvas: torch.Tensor, start: int, end: int, cfg: DecodeConfig, mask_id: int) -> torch.Tensor:
    """Positions eligible for commit: the block's masks, or the first `window` masks from the block start."""
    if cfg.window > 0:
        return ((canvas[0, start:] == mask_id).nonzero().flatten() + start)[: cfg.window]
    return (canvas[0, start:end] == mask_id).nonzero().flatten() + start


def _suffix_commits(result, cfg: DecodeConfig, generator, mask_id: int, canvas: torch.Tensor):
    """Polestar's suffix commit: fresh predictions beyond the block commit iff confidence ≥ τ_suffix (no
    forced token). Returns (positions, tokens, confidences) committed, or None."""
    if result.suffix_positions is None or not cfg.suffix_commit:
        return None
    tokens, confidence = propose(result.suffix_logits, cfg.temperature, generator, mask_id)
    ok = (confidence[0] >= cfg.tau_suffix) & (canvas[0, result.suffix_positions] == mask_id)
    positions = result.suffix_positions[ok]
    canvas[0, positions] = tokens[0, ok]
    return positions, tokens[0, ok], confidence[0, ok]


def _event(view: StepView, result, nfe: int, tokens, confidence, commit, cfg: DecodeConfig, t0: float,
           suffix, commit_policy) -> StepEvent:
    chosen = commit.mask[0]
    base_reason = {CommitRule.QUOTA: "quota", CommitRule.THRESHOLD: "threshold", CommitRule.FACTOR: "factor"}
    reasons = [base_reason[cfg.commit]] * len(view.targets)
    for i in commit.forced[0].nonzero().flatten().tolist():
        reasons[i] = "forced"
    if commit.drift is not None:
        for i in commit.drift[0].nonzero().flatten().tolist():
            reasons[i] = "drift"
    commits = [
        Commit(position=p, gen_index=p - view.prompt_len, token=t, confidence=c, reason=reasons[i])
        for i, p, t, c in zip(chosen.nonzero().flatten().tolist(), view.targets[chosen].tolist(),
                              tokens[0, chosen].tolist(), confidence[0, chosen].tolist())
    ]
    if suffix is not None:
        commits += [Commit(position=p, gen_index=p - view.prompt_len, token=t, confidence=c, reason="suffix")
                    for p, t, c in zip(*(x.tolist() for x in suffix))]
    extra = dict(result.extra)
    if result.delta is not None:
        extra["targets"] = view.targets.tolist()
        extra["confidence"] = confidence[0].tolist()
        extra["token_drift"] = result.drift[0].tolist()
        extra["drift_delta"] = result.delta[0].tolist()
        extra["drift_gate"] = commit_policy.gate(confidence[0]).tolist() if hasattr(commit_policy, "gate") else []
    refreshed = [] if result.refreshed_positions is None else result.refreshed_positions.tolist()
    return StepEvent(
        block=view.block, step=view.step, nfe=nfe, kind=result.kind, rows=result.rows, commits=commits,
        refreshed_positions=refreshed, refreshed_layers=list(result.refreshed_layers),
        ms=(time.perf_counter() - t0) * 1000, extra=extra,
    )
