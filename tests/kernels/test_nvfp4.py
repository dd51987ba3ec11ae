"""NVFP4 kernels against their torch reference and against polestar.quant, bit for bit, under the Triton
interpreter on CPU (and on a GPU where one exists): odd shapes, empty and one-row inputs, every dtype."""

from __future__ import annotations

import pytest
import torch

from kernels.nvfp4 import (
    e4m3_encode_reference,
    nvfp4_dequantize,
    nvfp4_dequantize_reference,
    nvfp4_dequantize_torch,
    nvfp4_quantize,
    nvfp4_quantize_reference,
)
from polestar.quant import get_format

# (300, 256): 4,800 groups, more than one interpreter program holds (kernels.nvfp4.program_block), the last partial
SHAPES = [(0, 16), (1, 16), (3, 48), (37, 144), (5, 2000 - 2000 % 16), (300, 256)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _x(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.logspace(-3, 2, shape[1] or 1)[: shape[1]]
    if shape[0] > 2:
        x[1] = 0.0  # an all-zero row: scale 0, codes 0
        x[2, :16] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -5.0, 6.0] + [0.0] * 6) * 0.01
    return x.to(dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_quantize_bits_equal_reference(shape, dtype):
    x = _x(shape, dtype)
    codes, scales, s = nvfp4_quantize(x, impl="triton")
    rcodes, rscales, rs = nvfp4_quantize_reference(x)
    assert torch.equal(codes, rcodes) and torch.equal(scales, rscales) and torch.equal(s, rs)
    out = nvfp4_dequantize(codes, scales, s, impl="triton")
    assert torch.equal(out, nvfp4_dequantize_reference(rcodes, rscales, rs))


def test_bit_exact_with_polestar_quant():
    x = _x((9, 64), torch.float32, seed=3)
    codes, scales, s = nvfp4_quantize(x, impl="triton")
    q = get_format("nvfp4", impl="torch").quantize(x)
    assert torch.equal(codes, q.codes) and torch.equal(scales, q.scales)
    assert torch.equal(nvfp4_dequantize(codes, scales, s, impl="triton"), get_format("nvfp4").dequantize(q))


def test_e4m3_encoding_every_code():
    """All 127 non-negative finite E4M3 values and the midpoints between neighbours (ties to even)."""
    values = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    mids = (values[1:] + values[:-1]) / 2
    probe = torch.cat([values, mids, torch.tensor([500.0, 1e-9])]).reshape(-1, 1).expand(-1, 16).contiguous()
    _, scales, _ = nvfp4_quantize(probe, tensor_scale=torch.tensor(1 / 6), impl="triton")
    assert torch.equal(scales.flatten(), e4m3_encode_reference(probe[:, 0]))


def test_fixed_tensor_scale_saturates_instead_of_nan():
    x = torch.full((2, 16), 1e6)
    codes, scales, s = nvfp4_quantize(x, tensor_scale=torch.tensor(1e-3), impl="triton")
    assert torch.isfinite(nvfp4_dequantize(codes, scales, s, impl="triton")).all()
    assert torch.equal(scales, nvfp4_quantize_reference(x, torch.tensor(1e-3))[1])


def test_bad_input():
    with pytest.raises(ValueError, match="multiple of 16"):
        nvfp4_quantize(torch.zeros(2, 20))
    with pytest.raises(ValueError, match="impl must be"):
        nvfp4_quantize(torch.zeros(2, 16), impl="cuda")


def test_table_lookup_dequantize_has_the_reference_bits_for_every_byte():
    """Every code byte against every E4M3 scale pattern (NaN patterns included, compared as bits), under a
    tensor scale that is not a power of two: the fast torch path is the reference, only cheaper."""
    every = torch.arange(256, dtype=torch.uint8)
    codes = every.reshape(2, 128).repeat(256, 1)  # rows 2p and 2p + 1: bytes 0–127 and 128–255 ...
    scales = every.repeat_interleave(2).reshape(512, 1).expand(512, 16).contiguous()  # ... both under pattern p
    s = torch.tensor(0.0123)
    got = nvfp4_dequantize_torch(codes, scales, s)
    ref = nvfp4_dequantize_reference(codes, scales, s)
    assert torch.equal(got.view(torch.int32), ref.view(torch.int32))
    assert torch.equal(nvfp4_dequantize(codes, scales, s, impl="torch").view(torch.int32), ref.view(torch.int32))
    assert torch.isnan(ref).any() and (ref == 0).any() and (ref < 0).any()  # the probe covers NaN, zero, sign
