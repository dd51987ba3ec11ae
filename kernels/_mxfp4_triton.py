"""Triton kernels of `kernels.mxfp4` (imported lazily). Layouts and rounding rules: `kernels/mxfp4.py`."""

import triton
import triton.language as tl

from kernels._nvfp4_triton import _e2m1_decode, _e2m1_encode


@triton.jit
def _e8m0_scale(code):
    """E8M0 code (biased exponent, int32) -> 2^(code − 127) in fp32; code 0 is the subnormal 2^-127."""
    normal = (code << 23).to(tl.float32, bitcast=True)
    return tl.where(code == 0, 5.877471754111438e-39, normal)


@triton.jit
def _mxfp4_quantize_kernel(x_ptr, codes_ptr, scales_ptr, n_groups, BLOCK_G: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    groups = pid * BLOCK_G + tl.arange(0, BLOCK_G).to(tl.int64)
    live = groups < n_groups
    pair = tl.arange(0, 16).to(tl.int64)
    mask = live[:, None]
    even_offs = groups[:, None] * 32 + 2 * pair[None, :]
    even = tl.load(x_ptr + even_offs, mask=mask, other=0.0).to(tl.float32)
    odd = tl.load(x_ptr + even_offs + 1, mask=mask, other=0.0).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(even), axis=1), tl.max(tl.abs(odd), axis=1))
    exponent = ((amax.to(tl.int32, bitcast=True) >> 23) & 255) - 127 - 2  # floor(log2 amax) − emax(E2M1)
    exponent = tl.minimum(tl.maximum(exponent, -127), 127)
    code = exponent + 127
    scale = _e8m0_scale(code)[:, None]
    ce = _e2m1_encode(even / scale)
    co = _e2m1_encode(odd / scale)
    tl.store(codes_ptr + groups[:, None] * 16 + pair[None, :], (ce | (co << 4)).to(tl.uint8), mask=mask)
    tl.store(scales_ptr + groups, code.to(tl.uint8), mask=live)


@triton.jit
def _mxfp4_dequantize_kernel(codes_ptr, scales_ptr, out_ptr, n_groups, BLOCK_G: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    groups = pid * BLOCK_G + tl.arange(0, BLOCK_G).to(tl.int64)
    live = groups < n_groups
    pair = tl.arange(0, 16).to(tl.int64)
    mask = live[:, None]
    packed = tl.load(codes_ptr + groups[:, None] * 16 + pair[None, :], mask=mask, other=0).to(tl.int32)
    scale = _e8m0_scale(tl.load(scales_ptr + groups, mask=live, other=127).to(tl.int32))[:, None]
    offs = groups[:, None] * 32 + 2 * pair[None, :]
    tl.store(out_ptr + offs, _e2m1_decode(packed & 15) * scale, mask=mask)
    tl.store(out_ptr + offs + 1, _e2m1_decode(packed >> 4) * scale, mask=mask)
