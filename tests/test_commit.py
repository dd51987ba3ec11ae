"""Commit rules on hand-built confidences whose correct answer is known by construction."""

from __future__ import annotations

import torch

from polestar.policies.commit import CommitContext, FactorPolicy, QuotaPolicy, ThresholdPolicy
from polestar.policies.sampling import certainty_density, propose

NEG = float("-inf")


def _c(*values: float) -> torch.Tensor:
    return torch.tensor([values], dtype=torch.float64)


def test_threshold_clear_winner_and_all_above():
    conf = _c(0.95, 0.2, 0.91, NEG, 0.899)
    out = ThresholdPolicy(0.9).select(conf, conf)
    assert torch.equal(out.mask, torch.tensor([[True, False, True, False, False]]))
    assert not out.forced.any()
    conf = _c(0.99, 0.97, 0.9)
    assert ThresholdPolicy(0.9).select(conf, conf).mask.all()  # the edge 0.9 ≥ τ commits


def test_threshold_all_below_forces_top1_and_ties_go_left():
    conf = _c(0.3, 0.6, 0.6, NEG, 0.1)
    out = ThresholdPolicy(0.9).select(conf, conf)
    assert torch.equal(out.mask, torch.tensor([[False, True, False, False, False]]))
    assert torch.equal(out.forced, out.mask)


def test_threshold_nothing_eligible_commits_nothing():
    conf = _c(NEG, NEG)
    out = ThresholdPolicy(0.9).select(conf, conf)
    assert not out.mask.any()


def _quota(k: int) -> CommitContext:
    """The context of a step whose plan commits k: k masks over one step."""
    return CommitContext(step=0, block_masks=k, steps_per_block=1)


def test_quota_takes_k_best_with_stable_ties():
    conf = _c(0.5, 0.7, 0.5, NEG, 0.7, 0.1)
    assert torch.equal(QuotaPolicy().select(conf, conf, _quota(3)).mask,
                       torch.tensor([[True, True, False, False, True, False]]))
    assert not QuotaPolicy().select(conf, conf, _quota(0)).mask.any()
    assert QuotaPolicy().select(conf, conf, _quota(99)).mask.sum() == 5  # never an ineligible position


def test_quota_follows_the_block_plan():
    """10 masks over 4 steps commit 3, 3, 2, 2; a step past the plan (masks left) commits one."""
    conf = _c(*[0.9 - 0.05 * i for i in range(10)])
    counts = [int(QuotaPolicy().select(conf, conf, CommitContext(step, 10, 4)).mask.sum()) for step in range(5)]
    assert counts == [3, 3, 2, 2, 1]


def test_quota_ranks_by_the_given_score():
    conf = _c(0.9, 0.8)
    rank = _c(0.1, 0.8)
    assert torch.equal(QuotaPolicy().select(conf, rank, _quota(1)).mask, torch.tensor([[False, True]]))


def test_factor_rule_ranks():
    # sorted c = 0.99, 0.9, 0.8, 0.7: (n+1)(1-c) = 0.02, 0.3, 0.8, 1.5 -> with f = 1: the first three
    conf = _c(0.7, 0.99, 0.8, 0.9)
    out = FactorPolicy(1.0).select(conf, conf)
    assert torch.equal(out.mask, torch.tensor([[False, True, True, True]]))
    # the first failure ends the prefix even if a later rank would pass: ranks 0.6 fails (3 · 0.4 = 1.2)
    conf = _c(0.95, 0.6, NEG)
    assert torch.equal(FactorPolicy(1.0).select(conf, conf).mask, torch.tensor([[True, False, False]]))
    # rank 1 is always admissible: forced when 2(1 − c) > f
    conf = _c(0.2, 0.1)
    out = FactorPolicy(1.0).select(conf, conf)
    assert torch.equal(out.mask, torch.tensor([[True, False]])) and torch.equal(out.forced, out.mask)


def test_propose_argmax_confidence_and_mask_exclusion():
    logits = torch.log(torch.tensor([[[0.1, 0.7, 0.2], [0.5, 0.1, 0.4]]]))
    tokens, conf = propose(logits, 0.0, None, mask_id=0)
    assert tokens.tolist() == [[1, 2]]
    torch.testing.assert_close(conf, torch.tensor([[0.7, 0.4]], dtype=torch.float64))


def test_certainty_density_edges():
    decoded = torch.tensor([[False] * 6])
    d = certainty_density(decoded, 1.0)[0]
    assert d[0] > d[2] > d[5] >= 0  # the left edge counts as decoded, the right only if the end is
    full = certainty_density(torch.ones(1, 6, dtype=torch.bool), 2.0)
    torch.testing.assert_close(full, torch.ones(1, 6, dtype=torch.float64))
