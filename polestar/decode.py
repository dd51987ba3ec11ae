"""The decode loop: the only block/step loop in the project. Every method is a cache policy × a commit rule.

Terms (arXiv 2502.09992, 2505.22618, 2607.14107; docs/algorithm.md §0):
- canvas: prompt (P tokens) + G = gen_length positions initialised to the mask token;
- block b: positions [P + bB, P + (b+1)B), decoded left to right (semi-autoregressive);
- step: one forward while block b still has masks (the loop never stops at the first EOS: the whole
  fixed-length trajectory runs, as the paper measures). A block fully committed before its turn is
  skipped with 0 NFE;
- NFE: number of forwards. TPF = non-EOS tokens of the final generated region / NFE; tokens per step =
  all committed tokens / NFE; TPS = non-EOS tokens / decode wall time (device synchronised).
Per step: the commit window gives the target positions (the block's masks, or the first W masked positions
with a sliding window); the cache policy runs one forward and returns logits for them; proposals and
confidences follow; a ranker orders them; the commit rule picks positions (reading the pass's per-target
signals if it needs any); the loop writes them into the canvas, commits the extra targets the pass offers
(predictions beyond the commit window) with the extra-target rule, and lets the cache policy observe the step.
The loop knows no method: adding one is a cache policy and/or a commit rule plus a preset (README,
"Development").

Batch > 1 (`decode_batch`): prompts are left-padded to one length, so every row's block b sits at the same
positions; the rows step through each block together, a row whose block is done waits (no commits, no NFE of
its own) until the others finish it, and every rule sees −inf confidence on positions a row has committed.
Each row's tokens and NFE equal its batch-1 decode (the transformer gives each row its own positions and
columns); the cache policies that support it say so (`CachePolicy.batchable`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from polestar import profiling
from polestar.caches import CachePolicy, cache_policy_class, make_cache_policy
from polestar.caches.base import Pass, StepView
from polestar.config import DecodeConfig
from polestar.errors import ConfigError
from polestar.kinds import REFRESH_KINDS, CommitReason
from polestar.models.cache import KVCache
from polestar.policies.commit import (CommitContext, CommitPolicy, Selection, make_commit_policy,
                                      make_extra_target_policy)
from polestar.policies.ranking import make_ranker
from polestar.policies.sampling import propose
from polestar.staleness import kv_staleness
from polestar.trace import Commit, StepEvent, Trace

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecodeCounters:
    """What the policies did in one decode, counted without a trace (one host sync at the end)."""

    refresh_steps: int  # forwards that recomputed stale cache entries (a pass kind in REFRESH_KINDS)
    drift_commits: int  # commits a rule made for a drift event (CommitReason.DRIFT)
    suffix_commits: int  # extra-target commits beyond the commit window (CommitReason.SUFFIX)
    suffix_eos_commits: int  # the subset of those that wrote EOS
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
    batch_nfe: int = 0  # forwards the loop ran for the whole batch (= nfe in batch 1; ≥ every row's nfe)

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


def decode(
    model,
    prompt_ids: torch.Tensor,
    cfg: DecodeConfig,
    trace: bool = False,
    on_step: Callable[[StepEvent, torch.Tensor], bool | None] | None = None,
    cache_policy: CachePolicy | None = None,
    commit_policy: CommitPolicy | None = None,
    staleness_reference: Callable[[torch.Tensor], KVCache | None] | None = None,
) -> DecodeResult:
    """Decode `prompt_ids` [1, P] with `cfg`. `on_step(event, canvas)` is called after every step when given
    (it implies tracing; its own time is excluded from the wall time); returning True stops the decode.
    `cache_policy` and `commit_policy` replace the ones `cfg` names (a method under development, or a test's).
    `staleness_reference(canvas)`: with `measure_staleness`, a cache a full forward over exactly this canvas has
    filled, or None (an analysis probe that runs that forward anyway, `polestar.probe.AttentionProbe.reference`);
    the staleness probe then skips its own forward."""
    if prompt_ids.dim() != 2 or prompt_ids.shape[0] != 1:
        raise ConfigError(f"prompt_ids must have shape [1, prompt_len] (batch 1), got {list(prompt_ids.shape)}: "
                          "decode several prompts with decode_batch")
    return _decode(model, prompt_ids, None, cfg, trace, on_step, cache_policy, commit_policy, staleness_reference)[0]


def decode_batch(model, prompts: Sequence[torch.Tensor | Sequence[int]], cfg: DecodeConfig) -> list[DecodeResult]:
    """Decode several prompts (each token ids [P_i] or [1, P_i]) in one batch; one result per prompt, in order.

    Each row's canvas and NFE equal `decode` of that prompt alone (greedy decoding; the module docstring says
    how). `wall_s` of every result is the batch's wall time. Methods whose cache policy needs per-row state
    (Polestar, Elastic-Cache, d2Cache, EntropyCache), the sliding commit window, sampling, tracing and the
    staleness probe decode one prompt at a time: asking for them with several prompts is a ConfigError."""
    if len(prompts) == 0:
        raise ConfigError("decode_batch got no prompts: give at least one")
    rows = [torch.as_tensor(p).reshape(-1) for p in prompts]
    if any(r.numel() == 0 for r in rows):
        raise ConfigError("a prompt is empty: give at least one token per prompt")
    if len(rows) == 1:
        return [decode(model, rows[0].unsqueeze(0).to(model.device), cfg)]
    longest = max(r.numel() for r in rows)
    pad = torch.tensor([longest - r.numel() for r in rows], device=model.device)
    filler = model.eos_id  # padding columns are never attended to; any token id serves
    ids = torch.stack([torch.cat([r.new_full((longest - r.numel(),), filler), r]) for r in rows]).to(model.device)
    return _decode(model, ids, pad, cfg)


def batch_problem(cfg: DecodeConfig, cache_policy: CachePolicy | type[CachePolicy] | None = None,
                  trace: bool = False) -> str | None:
    """Why `cfg` cannot decode a batch of several prompts (a message saying what to do), or None if it can."""
    cache_policy = cache_policy_class(cfg) if cache_policy is None else cache_policy
    if not cache_policy.batchable:
        return (f"cache '{cfg.cache}' keeps per-row state and decodes one prompt at a time: use a method with "
                "cache none, prefix or dual (baseline, parallel, fast-dllm, fast-dllm-prefix) for batch > 1")
    if cfg.commit_window > 0:
        return "the sliding commit window (commit_window > 0) decodes one prompt at a time: set it to 0"
    if cfg.temperature > 0:
        return "batch > 1 decodes greedily (each row equals its batch-1 decode): set temperature to 0"
    if trace or cfg.measure_staleness:
        return "tracing and the staleness probe decode one prompt at a time: turn them off for batch > 1"
    return None


@torch.no_grad()
def _decode(
    model,
    prompt_ids: torch.Tensor,
    pad: torch.Tensor | None,
    cfg: DecodeConfig,
    trace: bool = False,
    on_step: Callable[[StepEvent, torch.Tensor], bool | None] | None = None,
    cache_policy: CachePolicy | None = None,
    commit_policy: CommitPolicy | None = None,
    staleness_reference: Callable[[torch.Tensor], KVCache | None] | None = None,
) -> list[DecodeResult]:
    """The loop: `prompt_ids` [batch, P], left-padded by `pad` [batch] (None: no row is padded)."""
    batch, prompt_len = prompt_ids.shape
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
    cache_policy = make_cache_policy(cfg, model) if cache_policy is None else cache_policy
    if batch > 1 and (problem := batch_problem(cfg, cache_policy, trace)):
        raise ConfigError(problem)
    masks = torch.full((batch, cfg.gen_length), mask_id, dtype=prompt_ids.dtype, device=device)
    canvas = torch.cat([prompt_ids, masks], dim=1)
    generator = torch.Generator(device=device).manual_seed(cfg.seed) if cfg.temperature > 0 else None
    cache_policy.traced = trace
    commit_policy = make_commit_policy(cfg) if commit_policy is None else commit_policy
    extra_policy = make_extra_target_policy(cfg)
    ranker = make_ranker(cfg, mask_id)
    steps_per_block = cfg.total_steps // cfg.n_blocks
    record = Trace(prompt_len, cfg.gen_length, cfg.block_length) if trace else None
    nfe, stop, excluded = 0, False, 0.0
    # per row: [forwards it took part in, refresh steps, drift, suffix, suffix EOS, forced commits], summed on the
    # device (no host sync per step for the counters)
    counts = torch.zeros(batch, 6, dtype=torch.long, device=device)
    _sync(device)
    t_start = time.perf_counter()

    for block in range(cfg.n_blocks):
        start = prompt_len + block * cfg.block_length
        end = start + cfg.block_length
        n_masked = (canvas[:, start:end] == mask_id).sum(1)
        block_masks = tuple(n_masked.tolist())
        if not any(block_masks):
            continue
        view = StepView(canvas, prompt_len, block, start, end, 0, _targets(canvas, start, end, cfg, mask_id), pad)
        cache_policy.begin_block(view)
        while not stop:
            t_step = time.perf_counter()
            view.targets = _targets(canvas, start, end, cfg, mask_id)
            with profiling.section("forward (cache policy)"):
                result = cache_policy.forward(view)
            nfe += 1
            staleness = None
            if cfg.measure_staleness and cache_policy.cache is not None:
                t_measure = time.perf_counter()
                reference = staleness_reference(canvas) if staleness_reference is not None else None
                staleness = kv_staleness(model, canvas, cache_policy.cache, reference)
                excluded += time.perf_counter() - t_measure
            with profiling.section("propose + commit"):
                tokens, confidence = propose(result.logits, cfg.temperature, generator, mask_id)
                if batch > 1:  # a row's committed positions are not its targets
                    confidence = confidence.masked_fill(canvas[:, view.targets] != mask_id, float("-inf"))
                rank = ranker(confidence, canvas, prompt_len, view.targets)
                ctx = CommitContext(view.step, block_masks if batch > 1 else block_masks[0], steps_per_block,
                                    result.signals)
                selection = commit_policy.select(confidence, rank, ctx)
                chosen = selection.mask[0]
                canvas[:, view.targets] = torch.where(selection.mask, tokens, canvas[:, view.targets])
                extra = _extra_commits(result, extra_policy, cfg, generator, mask_id, canvas)
                counts += _step_counts(n_masked > 0, result.kind in REFRESH_KINDS, selection, extra, model.eos_id)
                cache_policy.observe(view, result.logits, chosen)
                n_masked = (canvas[:, start:end] == mask_id).sum(1)
                done = not bool(n_masked.any())
            if record is not None:
                _sync(device)
                event = _event(view, result, nfe, tokens, confidence, selection, commit_policy, ctx, t_step, extra,
                               extra_policy)
                if staleness is not None:
                    event.extra["staleness"] = staleness.tolist()
                record.events.append(event)
                if on_step is not None:
                    t_callback = time.perf_counter()
                    stop = bool(on_step(event, canvas))
                    excluded += time.perf_counter() - t_callback
            view.step += 1
            if done:
                break
        if stop:
            break

    _sync(device)
    wall = time.perf_counter() - t_start - excluded
    results = []
    for row, (forwards, refresh_steps, drift, suffix_n, suffix_eos, forced) in enumerate(counts.tolist()):
        first = 0 if pad is None else int(pad[row])
        generated = canvas[row, prompt_len:]
        results.append(DecodeResult(
            canvas=canvas if batch == 1 else canvas[row:row + 1, first:],
            prompt_len=prompt_len - first,
            nfe=forwards,
            committed=int((generated != mask_id).sum()),
            content_tokens=int(((generated != mask_id) & (generated != model.eos_id)).sum()),
            wall_s=wall,
            trace=record,
            counters=DecodeCounters(refresh_steps, drift, suffix_n, suffix_eos, forced),
            batch_nfe=nfe,
        ))
    return results


def _targets(canvas: torch.Tensor, start: int, end: int, cfg: DecodeConfig, mask_id: int) -> torch.Tensor:
    """Positions eligible for commit: the block's masks (in any row of the batch), or the first `commit_window`
    masks from the block start (batch 1)."""
    if cfg.commit_window > 0:
        return ((canvas[0, start:] == mask_id).nonzero().flatten() + start)[: cfg.commit_window]
    return (canvas[:, start:end] == mask_id).any(0).nonzero().flatten() + start


def _extra_commits(result: Pass, policy, cfg: DecodeConfig, generator, mask_id: int, canvas: torch.Tensor):
    """Commit among the pass's extra targets (predictions beyond the commit window) with the extra-target rule.
    Returns (positions, tokens, confidences) committed and every extra target's confidence, or None."""
    if result.extra_targets is None or policy is None:
        return None
    positions = result.extra_targets.positions
    tokens, confidence = propose(result.extra_targets.logits, cfg.temperature, generator, mask_id)
    ok = policy.select(confidence, (canvas[:, positions] == mask_id))[0]
    committed = positions[ok]
    canvas[0, committed] = tokens[0, ok]
    return committed, tokens[0, ok], confidence[0, ok], confidence[0]


def _step_counts(active: torch.Tensor, refresh: bool, selection: Selection, extra, eos_id: int) -> torch.Tensor:
    """This step's per-row [forward taken part in, refresh step, drift commits, extra-target commits, their EOS
    commits, forced commits] on the device, [batch, 6]. Extra targets exist in batch 1 only
    (`CachePolicy.batchable`)."""
    zero = torch.zeros_like(active, dtype=torch.long)
    drift = selection.by_reason.get(CommitReason.DRIFT)
    drift = zero if drift is None else drift.sum(-1)
    extra_n = zero if extra is None else zero + len(extra[0])
    extra_eos = zero if extra is None else zero + (extra[1] == eos_id).sum()
    return torch.stack([active.long(), active.long() * refresh, drift, extra_n, extra_eos, selection.forced.sum(-1)],
                       dim=1)


def _event(view: StepView, result: Pass, nfe: int, tokens, confidence, selection: Selection, commit_policy,
           ctx: CommitContext, t0: float, extra, extra_policy) -> StepEvent:
    chosen = selection.mask[0]
    reasons = [commit_policy.reason] * len(view.targets)
    for i in selection.forced[0].nonzero().flatten().tolist():
        reasons[i] = CommitReason.FORCED
    for reason, subset in selection.by_reason.items():
        for i in subset[0].nonzero().flatten().tolist():
            reasons[i] = reason
    commits = [
        Commit(position=p, gen_index=p - view.prompt_len, token=t, confidence=c, reason=str(reasons[i]))
        for i, p, t, c in zip(chosen.nonzero().flatten().tolist(), view.targets[chosen].tolist(),
                              tokens[0, chosen].tolist(), confidence[0, chosen].tolist())
    ]
    if extra is not None:
        commits += [Commit(position=p, gen_index=p - view.prompt_len, token=t, confidence=c,
                           reason=str(extra_policy.reason))
                    for p, t, c in zip(*(x.tolist() for x in extra[:3]))]
    columns = dict(result.extra)
    if extra is not None:  # what the extra-target rule saw, committed or not
        columns["extra_confidence"] = extra[3].tolist()
    if result.signals:  # per-target signals beside the targets and confidences they belong to (row 0)
        columns["targets"] = view.targets.tolist()
        columns["confidence"] = confidence[0].tolist()
        columns["prediction"] = tokens[0].tolist()  # each target's token this step, committed or not
        columns |= {_SIGNAL_COLUMNS.get(name, name): value[0].tolist() for name, value in result.signals.items()}
        columns |= commit_policy.trace_columns(confidence, ctx)
    refreshed = [] if result.refreshed_positions is None else result.refreshed_positions.tolist()
    return StepEvent(
        block=view.block, step=view.step, nfe=nfe, kind=str(result.kind), rows=result.rows, commits=commits,
        refreshed_positions=refreshed, refreshed_layers=list(result.refreshed_layers),
        ms=(time.perf_counter() - t0) * 1000, extra=columns,
    )


# trace column names of the signals (kept from the first trace schema, which the app and saved runs read)
_SIGNAL_COLUMNS = {"drift": "token_drift", "delta": "drift_delta"}
