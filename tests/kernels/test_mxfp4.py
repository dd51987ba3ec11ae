"""MXFP4 kernels against their torch reference and polestar.quant, bit for bit, under the Triton interpreter."""

from __future__ import annotations

import pytest
import torch

from kernels.mxfp4 import mxfp4_dequantize, mxfp4_dequantize_reference, mxfp4_quantize, mxfp4_quantize_reference
from polestar.quant import get_format

SHAPES = [(0, 32), (1, 32), (3, 96), (29, 160), (600, 256)]  # the last: 4,800 groups, two interpreter programs
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _x(shape, dtype):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1)) * torch.logspace(-4, 3, shape[1])
    if shape[0] > 2:
        x[1] = 0.0
        x[2, :32] = 2.0 ** torch.arange(-20, 12).float()  # exact powers of two: ⌊log2⌋ edges
    return x.to(dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_bits_equal_reference(shape, dtype):
    x = _x(shape, dtype)
    codes, scales = mxfp4_quantize(x, impl="triton")
    rcodes, rscales = mxfp4_quantize_reference(x)
    assert torch.equal(codes, rcodes) and torch.equal(scales, rscales)
    assert torch.equal(mxfp4_dequantize(codes, scales, impl="triton"), mxfp4_dequantize_reference(codes, scales))


def test_bit_exact_with_polestar_quant():
    x = _x((7, 96), torch.float32)
    codes, scales = mxfp4_quantize(x, impl="triton")
    q = get_format("mxfp4", impl="torch").quantize(x)
    assert torch.equal(codes, q.codes) and torch.equal(scales, q.scales)
    assert torch.equal(mxfp4_dequantize(codes, scales, impl="triton"), get_format("mxfp4").dequantize(q))


def test_polestar_decodes_the_same_tokens_with_kernels():
    """Polestar with its window cached in NVFP4 through the Triton kernels (interpreter on CPU) commits exactly
    the tokens it commits with the torch references, on the embedded model."""
    import polestar
    from polestar.api import encode_prompt
    from polestar.config import resolve
    from polestar.decode import decode

    model = polestar.load_model(polestar.DEFAULT_MODEL)
    ids = encode_prompt(model, "Reverse the list: 3 1 4 1 5")
    outs = [decode(model, ids, resolve("polestar", gen_length=64, impl=impl)) for impl in ("torch", "triton")]
    assert torch.equal(outs[0].canvas, outs[1].canvas) and outs[0].nfe == outs[1].nfe
