"""Fused gather + dequantize + anchor add against its torch reference and an fp64 dequantization."""

from __future__ import annotations

import pytest
import torch

from kernels.gather_dequant import gather_dequantize, gather_dequantize_reference
from kernels.nvfp4 import nvfp4_quantize


# (300, 256, 300): 4,800 output groups, more than one interpreter program holds (kernels.nvfp4.program_block)
@pytest.mark.parametrize("n,channels,m", [(1, 16, 1), (23, 48, 7), (40, 256, 0), (40, 256, 40), (300, 256, 300)])
def test_matches_reference(n, channels, m):
    g = torch.Generator().manual_seed(n + m)
    anchors = torch.randn(5, channels, generator=g)
    anchor_index = torch.randint(0, 5, (n,), generator=g)
    x = anchors[anchor_index] + 0.1 * torch.randn(n, channels, generator=g)
    codes, scales, s = nvfp4_quantize(x - anchors[anchor_index], impl="torch")
    rows = torch.randperm(n, generator=g)[:m]
    got = gather_dequantize(codes, scales, s, anchors, anchor_index, rows, impl="triton")
    ref = gather_dequantize_reference(codes, scales, s, anchors, anchor_index, rows)
    # kernel, table-lookup torch path and reference all compute e2m1 · (s_g · S) + anchor in fp32 in the same
    # order: equal bits
    assert torch.equal(got, ref)
    assert torch.equal(gather_dequantize(codes, scales, s, anchors, anchor_index, rows, impl="torch"), ref)
    assert got.shape == (m, channels)
    if m:
        assert (got - x[rows]).norm() <= 0.2 * (x[rows] - anchors[anchor_index[rows]]).norm()
