"""Triton kernels for Polestar's hot paths, each file with its kernel, launcher, a readable torch reference and
a public entry taking `impl="auto" | "triton" | "torch"`. Kernels never import polestar; Triton is imported only
when a kernel first runs.

- `nvfp4.py`: NVFP4 quantize / dequantize (E2M1 codes two per byte, E4M3 scales per 16, fp32 tensor scale).
- `mxfp4.py`: MXFP4 quantize / dequantize (E2M1 codes, E8M0 scales per 32).
- `gather_dequant.py`: fused gather + NVFP4 dequantize + anchor add (the sparse-recompute input tile).
- `proxy_kl.py`: proxy attention of cluster centroids + per-cluster KL drift in one pass.
- `token_kl.py`: token-drift KL of the block's final-layer attention rows (Polestar-Commit's δ).
"""
