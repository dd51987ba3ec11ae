"""MXFP4 quantize / dequantize of hidden-state rows (OCP Microscaling FP4).

Layout: x [rows, C] (fp32, fp16 or bf16; C a multiple of 32, contiguous). Outputs: `codes` [rows, C/2] uint8,
two E2M1 codes per byte (low nibble = even channel; same code as `kernels.nvfp4`); `scales` [rows, C/32] uint8
E8M0 biased exponents. Per group of 32 channels: X = 2^(⌊log2 amax⌋ − 2) (2 is E2M1's largest exponent),
q = RNE_E2M1(x / X). ⌊log2⌋ is read from the fp32 exponent bits, so the interpreter and a GPU agree bit for bit.
Public entries: `mxfp4_quantize(x, impl="auto")`, `mxfp4_dequantize(codes, scales, impl="auto")`.
"""

from __future__ import annotations

import torch

from kernels.nvfp4 import cdiv, program_block, resolve_impl, e2m1_decode_reference, e2m1_encode_reference

GROUP = 32
BLOCK_G = 32  # groups per program on a GPU: 1,024 values


def mxfp4_quantize_reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    g = x.float().reshape(x.shape[0], x.shape[1] // GROUP, GROUP)
    amax = g.abs().amax(-1) if g.numel() else torch.zeros(g.shape[:2])
    exponent = (torch.floor(torch.log2(amax.clamp_min(2.0**-126))) - 2).clamp(-127, 127)
    codes = e2m1_encode_reference(g / torch.exp2(exponent).unsqueeze(-1)).reshape(x.shape[0], x.shape[1])
    return codes[:, 0::2] | (codes[:, 1::2] << 4), (exponent + 127).to(torch.uint8)


def mxfp4_dequantize_reference(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    rows, channels = codes.shape[0], codes.shape[1] * 2
    unpacked = torch.stack([codes & 15, codes >> 4], dim=-1).reshape(rows, channels // GROUP, GROUP)
    values = e2m1_decode_reference(unpacked) * torch.exp2(scales.float() - 127).unsqueeze(-1)
    return values.reshape(rows, channels)


_COMPILED = None


def _compiled():
    global _COMPILED
    if _COMPILED is None:
        from kernels import _mxfp4_triton as k

        _COMPILED = (k._mxfp4_quantize_kernel, k._mxfp4_dequantize_kernel)
    return _COMPILED


def mxfp4_quantize(x: torch.Tensor, impl: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """x [rows, C] -> (codes [rows, C/2] uint8, scales [rows, C/32] uint8 E8M0)."""
    if x.dim() != 2 or x.shape[1] % GROUP:
        raise ValueError(f"x must be [rows, C] with C a multiple of {GROUP}, got {list(x.shape)}")
    if resolve_impl(impl, x.device) == "torch":
        return mxfp4_quantize_reference(x)
    rows, n_groups = x.shape[0], x.numel() // GROUP
    codes = torch.empty(rows, x.shape[1] // 2, dtype=torch.uint8, device=x.device)
    scales = torch.empty(rows, x.shape[1] // GROUP, dtype=torch.uint8, device=x.device)
    if n_groups:
        kernel, _ = _compiled()
        block = program_block(n_groups, x.device, BLOCK_G)
        kernel[(cdiv(n_groups, block),)](x.contiguous(), codes, scales, n_groups, BLOCK_G=block)
    return codes, scales


def mxfp4_dequantize(codes: torch.Tensor, scales: torch.Tensor, impl: str = "auto") -> torch.Tensor:
    if resolve_impl(impl, codes.device) == "torch":
        return mxfp4_dequantize_reference(codes, scales)
    rows, n_groups = codes.shape[0], scales.numel()
    out = torch.empty(rows, codes.shape[1] * 2, dtype=torch.float32, device=codes.device)
    if n_groups:
        _, kernel = _compiled()
        block = program_block(n_groups, codes.device, BLOCK_G)
        kernel[(cdiv(n_groups, block),)](codes.contiguous(), scales.contiguous(), out, n_groups, BLOCK_G=block)
    return out
