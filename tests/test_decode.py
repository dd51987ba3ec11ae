"""The decode loop: equivalences between methods, determinism, metrics, trace, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import polestar
from polestar.caches.base import CachePolicy, Pass, StepView
from polestar.config import PRESETS, resolve
from polestar.decode import decode, decode_batch
from polestar.kinds import CommitReason, PassKind
from polestar.policies.commit import CommitPolicy, Selection
from polestar.errors import ConfigError
from polestar.reference import generate as reference_generate
from tests.tiny_checkpoints import write_checkpoint

PROMPT = [5, 9, 11, 7, 13, 20, 21, 8]


@pytest.fixture(scope="module", params=["llada", "dream"])
def tiny(request, tmp_path_factory):
    root = write_checkpoint(tmp_path_factory.mktemp(request.param), request.param, kv_heads=2)
    return polestar.load_model(root)


def _ids(model) -> torch.Tensor:
    return torch.tensor([PROMPT], device=model.device)


def test_baseline_equals_reference_sampler(tiny):
    cfg = resolve("baseline", gen_length=32, block_length=8)
    ours = decode(tiny, _ids(tiny), cfg)
    ref = reference_generate(tiny, _ids(tiny), 32, 8)
    assert torch.equal(ours.canvas, ref.canvas)
    assert ours.nfe == ref.nfe == 32


def test_parallel_equals_reference_threshold(tiny):
    cfg = resolve("parallel", gen_length=32, block_length=8, tau_s=0.05)
    ours = decode(tiny, _ids(tiny), cfg)
    ref = reference_generate(tiny, _ids(tiny), 32, 8, threshold=0.05)
    assert torch.equal(ours.canvas, ref.canvas) and ours.nfe == ref.nfe


@pytest.mark.parametrize("method", ["fast-dllm", "fast-dllm-prefix"])
def test_cache_refreshed_every_step_equals_no_cache(tiny, method):
    cached = decode(tiny, _ids(tiny), resolve(method, gen_length=32, block_length=8, fastdllm_refresh_interval=1,
                                                tau_s=0.05))
    fresh = decode(tiny, _ids(tiny), resolve("parallel", gen_length=32, block_length=8, tau_s=0.05))
    assert torch.equal(cached.canvas, fresh.canvas) and cached.nfe == fresh.nfe


def test_block_equal_to_gen_length_is_one_block(tiny):
    out = decode(tiny, _ids(tiny), resolve("baseline", gen_length=16, block_length=16))
    ref = reference_generate(tiny, _ids(tiny), 16, 16)
    assert torch.equal(out.canvas, ref.canvas)


@pytest.mark.parametrize("method", list(PRESETS))
def test_every_preset_runs_and_fills_the_canvas(tiny, method):
    out = decode(tiny, _ids(tiny), resolve(method, gen_length=32, block_length=8, d2_k=8), trace=True)
    gen = out.token_ids
    assert gen.shape == (32,) and not (gen == tiny.mask_id).any()
    assert out.committed == 32 and 4 <= out.nfe <= 32 + 4
    assert out.tokens_per_step == pytest.approx(32 / out.nfe)
    assert out.tpf == pytest.approx(int((gen != tiny.eos_id).sum()) / out.nfe)
    steps, commits = out.trace.frames()
    assert len(steps) == out.nfe and len(commits) == 32
    assert sorted(commits["gen_index"].tolist()) == list(range(32))
    assert set(commits["reason"]) <= {"quota", "threshold", "forced", "factor"}


def test_seed_determinism(tiny):
    cfg = resolve("parallel", gen_length=16, block_length=8, temperature=1.0)
    a = decode(tiny, _ids(tiny), cfg.replace(seed=1)).canvas
    b = decode(tiny, _ids(tiny), cfg.replace(seed=1)).canvas
    c = decode(tiny, _ids(tiny), cfg.replace(seed=2)).canvas
    assert torch.equal(a, b) and not torch.equal(a, c)
    greedy = [decode(tiny, _ids(tiny), cfg.replace(temperature=0.0, seed=s)).canvas for s in (1, 2)]
    assert torch.equal(*greedy)


def test_trace_saves_to_parquet(tiny, tmp_path):
    out = decode(tiny, _ids(tiny), resolve("fast-dllm", gen_length=16, block_length=8), trace=True)
    steps_path, commits_path = out.trace.save(tmp_path / "run")
    import pandas as pd

    steps = pd.read_parquet(steps_path)
    assert list(steps["pass"][:1]) == ["full"] and set(steps["pass"]) <= {"full", "block"}
    assert pd.read_parquet(commits_path)["confidence"].between(0, 1).all()


def test_stop_from_callback_ends_within_one_step(tiny):
    seen = []
    out = decode(tiny, _ids(tiny), resolve("baseline", gen_length=16, block_length=8),
                 on_step=lambda event, canvas: seen.append(event.nfe) or len(seen) == 3)
    assert out.nfe == 3 and seen == [1, 2, 3]


def test_tracing_off_records_nothing(tiny):
    assert decode(tiny, _ids(tiny), resolve("fast-dllm", gen_length=16, block_length=8)).trace is None


def test_bad_input(tiny):
    with pytest.raises(ConfigError, match="multiple of block_length"):
        resolve("fast-dllm", gen_length=40, block_length=32)
    with pytest.raises(ConfigError, match="exceeds the model's maximum sequence length 256"):
        decode(tiny, _ids(tiny), resolve("baseline", gen_length=256, block_length=32))
    with pytest.raises(ConfigError, match="prompt is empty"):
        decode(tiny, torch.zeros(1, 0, dtype=torch.long), resolve("baseline"))
    with pytest.raises(ConfigError, match="prompt is empty"):
        polestar.generate(tiny, "   ", "baseline")
    with pytest.raises(ConfigError, match="unknown method 'fastest'"):
        polestar.generate(tiny, PROMPT, "fastest")
    with pytest.raises(ConfigError, match=r"unknown config field\(s\) tau"):
        polestar.generate(tiny, PROMPT, "baseline", tau=0.5)
    with pytest.raises(ConfigError, match=r"tau_s=1.5 is out of range: use a value in \[0.0, 1.0\]"):
        polestar.generate(tiny, PROMPT, "parallel", tau_s=1.5)


def test_generate_api_text_and_ids(tiny):
    r = polestar.generate(tiny, "the cat sat on the mat", "fast-dllm", gen_length=16, block_length=8)
    assert len(r.token_ids) == 16 and isinstance(r.text, str) and r.nfe >= 2
    assert r.prompt_ids[0] == tiny.tokenizer.convert_tokens_to_ids("<|start_header_id|>") or tiny.spec.family == "dream"
    raw = polestar.generate(tiny, "the cat", "fast-dllm", raw=True, gen_length=16, block_length=8)
    assert len(raw.prompt_ids) == 2


def test_cli_generate_json(tmp_path):
    root = write_checkpoint(tmp_path / "m", "llada")
    proc = subprocess.run(
        [sys.executable, "-m", "polestar", "generate", "--model", str(root), "--prompt", "the cat", "--method",
         "fast-dllm", "--gen-length", "16", "--block-length", "8", "--json"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"text", "nfe", "tpf", "tps"} <= set(summary)
    bad = subprocess.run([sys.executable, "-m", "polestar", "generate", "--model", str(root), "--prompt", "x",
                          "--gen-length", "20"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "multiple of block_length" in bad.stderr


class _RecomputeEverything(CachePolicy):
    """A toy cache policy written the way the README's "Adding a method" says: one class, one `forward`."""

    def forward(self, view: StepView) -> Pass:
        logits = self.model(view.canvas)
        return Pass(logits=logits[:, view.targets], kind=PassKind.FULL, rows=view.canvas.shape[1])


class _TopTwo(CommitPolicy):
    """A toy commit rule: the two most confident eligible positions per step."""

    reason = CommitReason.QUOTA

    def select(self, confidence, rank, ctx):
        eligible = torch.isfinite(confidence)
        order = torch.sort(rank.masked_fill(~eligible, float("-inf")), descending=True, stable=True).indices
        mask = torch.zeros_like(eligible).scatter_(-1, order[:, :2], True) & eligible
        return Selection(mask=mask, forced=torch.zeros_like(mask))


def test_a_method_defined_outside_the_library_runs_in_the_loop(tiny):
    """A cache policy and a commit rule defined here, handed to the loop, decode without touching it: they equal
    the no-cache quota rule at two tokens per step (the same computation by construction), and the trace
    names their pass kind and reason."""
    cfg = resolve("baseline", gen_length=32, block_length=8)
    out = decode(tiny, _ids(tiny), cfg, trace=True, cache_policy=_RecomputeEverything(tiny, cfg),
                 commit_policy=_TopTwo())
    two_per_step = decode(tiny, _ids(tiny), resolve("baseline", gen_length=32, block_length=8, steps=16))
    assert torch.equal(out.canvas, two_per_step.canvas) and out.nfe == two_per_step.nfe == 16
    steps, commits = out.trace.frames()
    assert set(steps["pass"]) == {"full"} and set(commits.reason) == {"quota"} and len(commits) == 32


BATCHABLE = ["baseline", "parallel", "fast-dllm", "fast-dllm-prefix"]


def _batch_prompts() -> list[list[int]]:
    """Four prompts of different lengths (so three rows are left-padded, by different amounts)."""
    return [PROMPT, PROMPT[:3], PROMPT[::-1] + PROMPT[:5], [7, 30, 5, 2, 40, 6]]


@pytest.mark.parametrize("method", BATCHABLE)
def test_batch_of_four_equals_batch_one_token_for_token(tiny, method):
    cfg = resolve(method, gen_length=32, block_length=8, steps=16)
    prompts = [torch.tensor(p, device=tiny.device) for p in _batch_prompts()]
    batch = decode_batch(tiny, prompts, cfg)
    for prompt, row in zip(prompts, batch):
        alone = decode(tiny, prompt.unsqueeze(0), cfg)
        assert torch.equal(row.canvas, alone.canvas) and row.prompt_len == len(prompt)
        assert (row.nfe, row.committed, row.content_tokens, row.counters) == \
            (alone.nfe, alone.committed, alone.content_tokens, alone.counters)


def test_quota_plans_each_row_from_its_own_block():
    from polestar.policies.commit import CommitContext, QuotaPolicy

    conf = torch.tensor([[0.9, 0.8, 0.7, 0.6], [0.5, float("-inf"), 0.4, 0.3]], dtype=torch.float64)
    # row 0 entered the block with 4 masks, row 1 with 3; 2 steps per block: plans [2, 2] and [2, 1]
    first = QuotaPolicy().select(conf, conf, CommitContext(0, (4, 3), 2)).mask
    second = QuotaPolicy().select(conf, conf, CommitContext(1, (4, 3), 2)).mask
    assert first.tolist() == [[True, True, False, False], [True, False, True, False]]
    assert second.sum(1).tolist() == [2, 1]


@pytest.mark.parametrize("method,message", [("polestar", "cache 'polestar'"), ("elastic-cache", "cache 'elastic'"),
                                            ("d2cache", "cache 'd2'")])
def test_batch_of_a_per_row_method_is_a_clear_error(tiny, method, message):
    with pytest.raises(ConfigError, match=message):
        decode_batch(tiny, [PROMPT, PROMPT[:4]], resolve(method, gen_length=32, block_length=8))


def test_batch_bad_input(tiny):
    cfg = resolve("fast-dllm", gen_length=32, block_length=8)
    with pytest.raises(ConfigError, match="no prompts"):
        decode_batch(tiny, [], cfg)
    with pytest.raises(ConfigError, match="empty"):
        decode_batch(tiny, [PROMPT, []], cfg)
    with pytest.raises(ConfigError, match="temperature"):
        decode_batch(tiny, [PROMPT, PROMPT[:4]], resolve("fast-dllm", gen_length=32, block_length=8,
                                                         temperature=0.5))
    with pytest.raises(ConfigError, match="decode_batch"):
        decode(tiny, torch.tensor([PROMPT, PROMPT], device=tiny.device), cfg)
    one = decode_batch(tiny, [PROMPT], cfg)  # one prompt: the batch-1 path
    assert torch.equal(one[0].canvas, decode(tiny, _ids(tiny), cfg).canvas)
