"""Fused gather + NVFP4 dequantize + anchor add: the dense hidden-state tile of the selected clusters' members
for Polestar's sparse recompute, read straight from the quantized window store.

Layout: `codes` [n, C/2] uint8 and `scales` [n, C/16] uint8 (E4M3 bits) as written by `kernels.nvfp4`, fp32
`tensor_scale`, `anchors` [A, C] fp32 (snapshots of cluster centroids), `anchor_index` [n] int64 (row -> anchor
row), `rows` [m] int64 (the members to fetch). Output fp32 [m, C] = dequant(codes[rows]) + anchors[anchor_index[rows]].
One pass: each byte of codes is read once, no dense intermediate. C a multiple of 16.
Public entry: `gather_dequantize(..., impl="auto")`; `gather_dequantize_reference` is the torch version.
"""

from __future__ import annotations

import torch

from kernels.nvfp4 import cdiv, nvfp4_dequantize_reference, nvfp4_dequantize_torch, program_block, resolve_impl


def gather_dequantize_reference(codes, scales, tensor_scale, anchors, anchor_index, rows) -> torch.Tensor:
    values = nvfp4_dequantize_reference(codes[rows], scales[rows], tensor_scale)
    return values + anchors[anchor_index[rows]]


def gather_dequantize(codes: torch.Tensor, scales: torch.Tensor, tensor_scale: torch.Tensor, anchors: torch.Tensor,
                      anchor_index: torch.Tensor, rows: torch.Tensor, impl: str = "auto") -> torch.Tensor:
    if resolve_impl(impl, codes.device) == "torch":  # the reference's bits, through the table-lookup dequantize
        return nvfp4_dequantize_torch(codes[rows], scales[rows], tensor_scale) + anchors[anchor_index[rows]]
    channels = codes.shape[1] * 2
    groups_per_row = channels // 16
    out = torch.empty(len(rows), channels, dtype=torch.float32, device=codes.device)
    n_out_groups = len(rows) * groups_per_row
    if n_out_groups:
        from kernels._nvfp4_triton import _nvfp4_gather_dequantize_kernel

        block = program_block(n_out_groups, codes.device)
        _nvfp4_gather_dequantize_kernel[(cdiv(n_out_groups, block),)](
            codes.contiguous(), scales.contiguous(), anchors.float().contiguous(), anchor_index.contiguous(),
            rows.contiguous(), out, float(tensor_scale), n_out_groups, groups_per_row, channels, BLOCK_G=block,
            # no fused multiply-add: the product is rounded before the anchor add, as in the torch reference (with
            # fusion the GPU build rounded once and `python -m kernels.bench` on an H200 failed bit parity)
            enable_fp_fusion=False)
    return out
