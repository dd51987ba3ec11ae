"""Triton kernels of `kernels.nvfp4` (imported lazily: CPU-only installs never import Triton).
Layouts and rounding rules are documented in `kernels/nvfp4.py`."""

import triton
import triton.language as tl


@triton.jit
def _e4m3_encode(s):
    """s >= 0 fp32 [BLOCK] -> E4M3 codes (int32), RNE, saturating at 448 (0x7E)."""
    s = tl.minimum(s, 448.0)
    bits = s.to(tl.int32, bitcast=True)
    exp = ((bits >> 23) & 255) - 127
    mant = bits & 0x7FFFFF
    keep = mant >> 20
    lower = mant & 0xFFFFF
    up = (lower > 0x80000) | ((lower == 0x80000) & ((keep & 1) == 1))
    keep = keep + up.to(tl.int32)
    carry = keep == 8
    exp = tl.where(carry, exp + 1, exp)
    keep = tl.where(carry, 0, keep)
    normal = ((exp + 7) << 3) | keep
    f = s * 512.0  # subnormal E4M3 is m · 2^-9, m in 0..7 (m = 8 is the smallest normal, code 8)
    fl = tl.floor(f)
    diff = f - fl
    fl_i = fl.to(tl.int32)
    sub = fl_i + ((diff > 0.5) | ((diff == 0.5) & ((fl_i & 1) == 1))).to(tl.int32)
    return tl.where(exp < -6, sub, normal)


@triton.jit
def _e4m3_decode(code):
    e = code >> 3
    m = code & 7
    normal = (((e - 7 + 127) << 23) | (m << 20)).to(tl.float32, bitcast=True)
    return tl.where(e == 0, m.to(tl.float32) * 0.001953125, normal)


@triton.jit
def _e2m1_encode(v):
    a = tl.abs(v)
    idx = ((a > 0.25).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a > 1.25).to(tl.int32)
           + (a >= 1.75).to(tl.int32) + (a > 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32)
           + (a > 5.0).to(tl.int32))
    sign = ((v < 0) & (idx > 0)).to(tl.int32)
    return idx | (sign << 3)


@triton.jit
def _e2m1_decode(c):
    i = c & 7
    mag = tl.where(i < 4, i.to(tl.float32) * 0.5, tl.where(i == 4, 2.0, tl.where(i == 5, 3.0,
                                                                                 tl.where(i == 6, 4.0, 6.0))))
    return tl.where(c >= 8, -mag, mag)


@triton.jit
def _nvfp4_quantize_kernel(x_ptr, codes_ptr, scales_ptr, tensor_scale, n_groups, BLOCK_G: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    groups = pid * BLOCK_G + tl.arange(0, BLOCK_G).to(tl.int64)
    live = groups < n_groups
    pair = tl.arange(0, 8).to(tl.int64)
    even_offs = groups[:, None] * 16 + 2 * pair[None, :]
    mask = live[:, None]
    even = tl.load(x_ptr + even_offs, mask=mask, other=0.0).to(tl.float32)
    odd = tl.load(x_ptr + even_offs + 1, mask=mask, other=0.0).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(even), axis=1), tl.max(tl.abs(odd), axis=1))
    scale_code = _e4m3_encode(amax / (6.0 * tensor_scale))
    denom = _e4m3_decode(scale_code) * tensor_scale
    safe = tl.where(denom > 0, denom, 1.0)[:, None]
    zero = (denom == 0)[:, None]
    ce = _e2m1_encode(tl.where(zero, 0.0, even / safe))
    co = _e2m1_encode(tl.where(zero, 0.0, odd / safe))
    tl.store(codes_ptr + groups[:, None] * 8 + pair[None, :], (ce | (co << 4)).to(tl.uint8), mask=mask)
    tl.store(scales_ptr + groups, scale_code.to(tl.uint8), mask=live)


@triton.jit
def _nvfp4_dequantize_kernel(codes_ptr, scales_ptr, out_ptr, tensor_scale, n_groups, BLOCK_G: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    groups = pid * BLOCK_G + tl.arange(0, BLOCK_G).to(tl.int64)
    live = groups < n_groups
    pair = tl.arange(0, 8).to(tl.int64)
    mask = live[:, None]
    packed = tl.load(codes_ptr + groups[:, None] * 8 + pair[None, :], mask=mask, other=0).to(tl.int32)
    scale = _e4m3_decode(tl.load(scales_ptr + groups, mask=live, other=0).to(tl.int32)) * tensor_scale
    even = _e2m1_decode(packed & 15) * scale[:, None]
    odd = _e2m1_decode(packed >> 4) * scale[:, None]
    offs = groups[:, None] * 16 + 2 * pair[None, :]
    tl.store(out_ptr + offs, even, mask=mask)
    tl.store(out_ptr + offs + 1, odd, mask=mask)


@triton.jit
def _nvfp4_gather_dequantize_kernel(codes_ptr, scales_ptr, anchors_ptr, anchor_index_ptr, rows_ptr, out_ptr,
                                    tensor_scale, n_out_groups, groups_per_row, channels, BLOCK_G: tl.constexpr):
    """out[i] = dequant(codes[rows[i]]) + anchors[anchor_index[rows[i]]], one program per BLOCK_G output groups."""
    pid = tl.program_id(0).to(tl.int64)
    out_groups = pid * BLOCK_G + tl.arange(0, BLOCK_G).to(tl.int64)
    live = out_groups < n_out_groups
    out_row = out_groups // groups_per_row
    g_in_row = out_groups % groups_per_row
    src_row = tl.load(rows_ptr + out_row, mask=live, other=0).to(tl.int64)
    anchor_row = tl.load(anchor_index_ptr + src_row, mask=live, other=0).to(tl.int64)
    src_group = src_row * groups_per_row + g_in_row
    pair = tl.arange(0, 8).to(tl.int64)
    mask = live[:, None]
    packed = tl.load(codes_ptr + src_group[:, None] * 8 + pair[None, :], mask=mask, other=0).to(tl.int32)
    scale = _e4m3_decode(tl.load(scales_ptr + src_group, mask=live, other=0).to(tl.int32)) * tensor_scale
    channel = g_in_row[:, None] * 16 + 2 * pair[None, :]
    anchor_base = anchor_row[:, None] * channels + channel
    even = _e2m1_decode(packed & 15) * scale[:, None] + tl.load(anchors_ptr + anchor_base, mask=mask, other=0.0)
    odd = _e2m1_decode(packed >> 4) * scale[:, None] + tl.load(anchors_ptr + anchor_base + 1, mask=mask, other=0.0)
    out_base = out_row[:, None] * channels + channel
    tl.store(out_ptr + out_base, even, mask=mask)
    tl.store(out_ptr + out_base + 1, odd, mask=mask)
