"""The reference sampler on scripted logits (order and count of commits known by construction), and on the
shipped model."""

from __future__ import annotations

import torch

from polestar.reference import generate, planned_commits
from tests.mock_model import ScriptedModel


def test_planned_commits_split_evenly_remainder_first():
    assert planned_commits(32, 32) == [1] * 32
    assert planned_commits(10, 4) == [3, 3, 2, 2]
    assert planned_commits(3, 5) == [1, 1, 1, 0, 0]


def _model(prompt_len: int, gen: int, confidence: torch.Tensor) -> ScriptedModel:
    tokens = torch.arange(prompt_len + gen) % 10 + 1
    return ScriptedModel(tokens, torch.cat([torch.ones(prompt_len), confidence]))


def test_one_token_per_step_commits_most_confident_first_within_block():
    prompt = torch.tensor([[7, 7, 7]])
    conf = torch.tensor([0.3, 0.9, 0.5, 0.7, 0.95, 0.2, 0.4, 0.6])
    model = _model(3, 8, conf)
    order = []
    canvas_before = None

    def spy(ids):
        nonlocal canvas_before
        if canvas_before is not None:
            newly = ((canvas_before == model.mask_id) & (ids != model.mask_id)).nonzero()[:, 1].tolist()
            order.extend(newly)
        canvas_before = ids.clone()
        return ScriptedModel.__call__(model, ids)

    model_call = type("M", (), {"mask_id": model.mask_id, "__call__": lambda self, ids: spy(ids)})()
    out = generate(model_call, prompt, gen_length=8, block_length=4)
    assert out.nfe == 8
    # block 1 = positions 3..6 by confidence 0.9, 0.7, 0.5, 0.3; block 2 = 7..10: 0.95, 0.6, 0.4, 0.2
    assert order == [4, 6, 5, 3, 7, 10, 9]  # the last commit happens after the last forward
    assert torch.equal(out.canvas[0, 3:], model.tokens[3:11])


def test_threshold_commits_all_above_and_forces_the_top_one():
    prompt = torch.tensor([[7, 7]])
    conf = torch.tensor([0.95, 0.92, 0.5, 0.6, 0.1, 0.2, 0.3, 0.4])
    model = _model(2, 8, conf)
    out = generate(model, prompt, gen_length=8, block_length=4, threshold=0.9)
    # block 1: step 1 commits 0.95, 0.92; then forced 0.6; then forced 0.5. Block 2: four forced steps.
    assert out.nfe == 3 + 4 and out.steps_per_row == [7]
    assert torch.equal(out.canvas[0, 2:], model.tokens[2:10])


def test_temperature_uses_the_generator():
    prompt = torch.tensor([[7]])
    model = _model(1, 8, torch.full((8,), 0.5))
    a = generate(model, prompt, 8, 8, temperature=1.0, generator=torch.Generator().manual_seed(0)).canvas
    b = generate(model, prompt, 8, 8, temperature=1.0, generator=torch.Generator().manual_seed(0)).canvas
    c = generate(model, prompt, 8, 8, temperature=1.0, generator=torch.Generator().manual_seed(1)).canvas
    assert torch.equal(a, b) and not torch.equal(a, c)
