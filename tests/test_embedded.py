"""The shipped model: loads like LLaDA-8B (no special case), decodes correctly, every preset runs on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import polestar
from polestar import tasks
from polestar.api import encode_prompt
from polestar.config import PRESETS, resolve
from polestar.decode import decode, decode_batch
from polestar.reference import generate as reference_generate

ROOT = Path(polestar.DEFAULT_MODEL)


@pytest.fixture(scope="module")
def model():
    return polestar.load_model(polestar.DEFAULT_MODEL)


def test_shipped_folder_is_a_llada_checkpoint():
    cfg = json.loads((ROOT / "config.json").read_text())
    assert cfg["architectures"] == ["LLaDAModelLM"] and cfg["model_type"] == "llada"
    assert cfg["max_sequence_length"] >= 1024
    assert (ROOT / "model.safetensors").stat().st_size <= 40 * 2**20
    for name in ("tokenizer.json", "tokenizer_config.json", "README.md"):
        assert (ROOT / name).is_file()


def test_baseline_equals_reference_sampler(model):
    ex = tasks.make("arith", 1, seed=0)[0]
    ids = encode_prompt(model, ex.prompt)
    ours = decode(model, ids, resolve("baseline", gen_length=64, block_length=32))
    ref = reference_generate(model, ids, 64, 32)
    assert torch.equal(ours.canvas, ref.canvas)


@pytest.mark.parametrize("method", list(PRESETS))
def test_every_preset_runs(model, method):
    out = polestar.generate(model, "Reverse the list: 3 1 4 1 5", method, gen_length=64)
    assert len(out.token_ids) == 64 and model.mask_id not in out.token_ids and out.nfe >= 2


def test_polestar_with_components_off_is_fast_dllm(model):
    ids = encode_prompt(model, tasks.make("lists", 1, seed=0)[0].prompt)
    off = dict(polestar_cache=False, polestar_current_commit=False, polestar_suffix_commit=False)
    a = decode(model, ids, resolve("fast-dllm", gen_length=128))
    b = decode(model, ids, resolve("polestar", gen_length=128, **off))
    assert torch.equal(a.canvas, b.canvas) and a.nfe == b.nfe


def test_polestar_kernels_decode_the_same_tokens(model):
    """Polestar with every kernel in Triton (interpreter: NVFP4 quantize, fused gather-dequantize, proxy attention
    + KL, token-drift KL) commits the same tokens at the same steps for the same reasons as with the torch
    references, on an embedded-model prompt (arithmetic: the trained model decodes short lists in a couple of
    forwards, before any refresh). One prompt whose decode refreshes on 6 of its 11 steps: the interpreter takes
    ~40 s per decode, a second prompt added no path the first leaves out."""
    for ex in tasks.make("arith", 2, seed=3)[1:]:
        ids = encode_prompt(model, ex.prompt)
        runs = [decode(model, ids, resolve("polestar", gen_length=64, impl=impl), trace=True)
                for impl in ("torch", "triton")]
        assert torch.equal(runs[0].canvas, runs[1].canvas)
        assert runs[0].nfe == runs[1].nfe

        def commits(result):
            return [(e.step, c.position, c.token, c.reason) for e in result.trace.events for c in e.commits]

        assert commits(runs[0]) == commits(runs[1])
        refreshes = [e.extra.get("refresh") for e in runs[0].trace.events]
        assert any(refreshes), "the prompts must exercise the refresh path"


@pytest.mark.parametrize("method", ["baseline", "parallel", "fast-dllm", "fast-dllm-prefix"])
def test_batch_of_four_equals_batch_one(model, method):
    """Held-out prompts of different lengths, decoded together, each row token for token as alone."""
    exs = tasks.make("arith", 2, seed=0) + tasks.make("lists", 2, seed=0)
    prompts = [encode_prompt(model, ex.prompt)[0] for ex in exs]
    assert len({len(p) for p in prompts}) == 4
    cfg = resolve(method, gen_length=64, block_length=32)
    for prompt, row in zip(prompts, decode_batch(model, prompts, cfg)):
        alone = decode(model, prompt.unsqueeze(0), cfg)
        assert torch.equal(row.canvas, alone.canvas) and row.nfe == alone.nfe


def test_a_padded_batch_forward_is_each_row_alone_bit_for_bit(model):
    """The first forward of a batch decode (held-out prompts + 256 masks): every row's logits exactly as alone.
    Token equality of short decodes can hide a last-bit difference; this cannot."""
    exs = tasks.make("arith", 16, seed=0)[12:16]
    prompts = [encode_prompt(model, ex.prompt)[0] for ex in exs]
    longest = max(len(p) for p in prompts)
    pad = torch.tensor([longest - len(p) for p in prompts])
    masks = torch.full((256,), model.mask_id)
    ids = torch.stack([torch.cat([torch.full((int(n),), model.eos_id), p, masks]) for n, p in zip(pad, prompts)])
    with torch.no_grad():
        batch = model.run(ids, pad=pad).logits
        for row, p in enumerate(prompts):
            alone = model.run(torch.cat([p, masks]).unsqueeze(0)).logits
            assert torch.equal(batch[row:row + 1, int(pad[row]):], alone), row


def test_readme_examples_print_what_the_readme_says(model):
    """The README's library, CLI and API examples use one prompt, and its API comment shows the answer: the
    shipped weights must give that answer, with the method and length each example uses."""
    import re

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    claimed = re.search(r'metrics = outputs\[5\]\s+# \{"text": "([^"]+)"', readme).group(1)
    calls = re.findall(r'[(,] ?"([^"]+)", method="([\w-]+)", gen_length=(\d+)', readme)
    cli = re.findall(r'generate --prompt "([^"]+)" --method ([\w-]+)', readme)
    assert len(calls) == 2 and len(cli) == 1
    for prompt, method, length in {*calls, (*cli[0], "256")}:  # the API and library examples are one decode
        assert polestar.generate(model, prompt, method, gen_length=int(length)).text == claimed, (prompt, method)
