"""NVFP4 quantize / dequantize of hidden-state rows (Polestar's residual cache format).

Layout: x [rows, C] (fp32, fp16 or bf16; C a multiple of 16, contiguous). Outputs: `codes` [rows, C/2] uint8,
two E2M1 codes per byte (low nibble = even channel; bit 3 sign, bits 0–2 index {0, .5, 1, 1.5, 2, 3, 4, 6});
`scales` [rows, C/16] uint8 holding FP8-E4M3 bit patterns; one fp32 tensor scale S = amax|x| / (6·448).
Per group g of 16 channels: s_g = e4m3(amax_g / (6·S)), q = RNE_E2M1(x / (s_g·S)).
Rounding is done with integer bit operations (never fp8 casts), so the Triton interpreter, which mis-rounds
fp32→fp8 casts, gives the same bits as a GPU. Arithmetic inside kernels is fp32 (the interpreter's bf16 math is
wrong). Any Triton 3.x with plain pointer arithmetic; hardware: any CUDA GPU, or the CPU interpreter
(TRITON_INTERPRET=1 set before this module is imported).

Public entries: `nvfp4_quantize(x, tensor_scale=None, impl="auto")`, `nvfp4_dequantize(codes, scales,
tensor_scale, impl="auto")`; `*_reference` are the readable torch versions (impl="torch" dequantizes with
`nvfp4_dequantize_torch`, a table-lookup form of the reference with the same bits).
"""

from __future__ import annotations

import logging
import os

import torch

log = logging.getLogger(__name__)

E4M3_MAX = 448.0
FP4_MAX = 6.0
GROUP = 16


# --- torch reference ------------------------------------------------------------------------------------
def e4m3_encode_reference(s: torch.Tensor) -> torch.Tensor:
    """Non-negative fp32 -> E4M3 bit patterns (uint8), round to nearest even, saturating at 448."""
    return s.clamp(0, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)


def e4m3_decode_reference(bits: torch.Tensor) -> torch.Tensor:
    return bits.view(torch.float8_e4m3fn).float()


def e2m1_encode_reference(v: torch.Tensor) -> torch.Tensor:
    """fp32 values (already scaled) -> 4-bit codes, nearest grid point, ties to the even code, clamp at 6."""
    a = v.abs()
    idx = ((a > 0.25).int() + (a >= 0.75).int() + (a > 1.25).int() + (a >= 1.75).int() + (a > 2.5).int()
           + (a >= 3.5).int() + (a > 5.0).int())
    sign = ((v < 0) & (idx > 0)).int()
    return (idx | (sign << 3)).to(torch.uint8)


def e2m1_decode_reference(codes: torch.Tensor) -> torch.Tensor:
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], device=codes.device)
    mag = grid[(codes & 7).long()]
    return torch.where(codes >= 8, -mag, mag)


def tensor_scale_of(x: torch.Tensor) -> torch.Tensor:
    """S = amax|x| / (6·448), floored at the smallest normal fp32 (an empty or all-zero tensor gets that)."""
    amax = x.float().abs().amax() if x.numel() else torch.zeros((), device=x.device)
    return (amax / (FP4_MAX * E4M3_MAX)).clamp_min(torch.finfo(torch.float32).tiny)


def nvfp4_quantize_reference(x: torch.Tensor, tensor_scale: torch.Tensor | None = None):
    """x [rows, C] -> (codes [rows, C/2] uint8, scales [rows, C/16] uint8 E4M3 bits, tensor_scale fp32)."""
    s = tensor_scale_of(x) if tensor_scale is None else tensor_scale.float()
    g = x.float().reshape(x.shape[0], x.shape[1] // GROUP, GROUP)
    scale_bits = e4m3_encode_reference(g.abs().amax(-1) / (FP4_MAX * s))
    denom = e4m3_decode_reference(scale_bits).unsqueeze(-1) * s
    q = torch.where(denom > 0, g / torch.where(denom > 0, denom, torch.ones_like(denom)), torch.zeros_like(g))
    codes = e2m1_encode_reference(q).reshape(x.shape[0], x.shape[1])
    return codes[:, 0::2] | (codes[:, 1::2] << 4), scale_bits, s


def nvfp4_dequantize_reference(codes: torch.Tensor, scales: torch.Tensor, tensor_scale: torch.Tensor) -> torch.Tensor:
    rows, channels = codes.shape[0], codes.shape[1] * 2
    unpacked = torch.stack([codes & 15, codes >> 4], dim=-1).reshape(rows, channels // GROUP, GROUP)
    values = e2m1_decode_reference(unpacked) * (e4m3_decode_reference(scales) * tensor_scale).unsqueeze(-1)
    return values.reshape(rows, channels)


# --- torch fast path (what impl="torch" runs): table lookups instead of per-nibble arithmetic -------------
_TABLES: dict = {}


def _tables(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Per device, built once from the reference decoders: byte -> its two E2M1 values [256, 2] (low nibble
    first), and E4M3 bits -> fp32 [256]."""
    if device not in _TABLES:
        every = torch.arange(256, dtype=torch.uint8, device=device)
        pairs = e2m1_decode_reference(torch.stack([every & 15, every >> 4], dim=-1))
        _TABLES[device] = pairs.contiguous(), e4m3_decode_reference(every)
    return _TABLES[device]


def nvfp4_dequantize_torch(codes: torch.Tensor, scales: torch.Tensor, tensor_scale: torch.Tensor) -> torch.Tensor:
    """`nvfp4_dequantize_reference`, bit for bit (the same two fp32 products), 1.3–1.8× faster on a 2-core CPU
    (200 × 512 rows beside other work): one gather per byte and per scale instead of unpacking nibbles and
    decoding them arithmetically."""
    pairs, e4m3 = _tables(codes.device)
    rows, channels = codes.shape[0], codes.shape[1] * 2
    values = pairs[codes.long()].reshape(rows, channels // GROUP, GROUP)
    return (values * (e4m3[scales.long()] * tensor_scale).unsqueeze(-1)).reshape(rows, channels)


# --- Triton (kernels in `_nvfp4_triton.py`, imported on first use) ----------------------------------------
_COMPILED = None
BLOCK_G = 64  # groups per program on a GPU: 1,024 values, one program per 4 KB of fp32 input


def program_block(n: int, device: torch.device, gpu_block: int = BLOCK_G) -> int:
    """Items (groups, keys) one program handles, shared by every kernel here: `gpu_block` on a GPU; in the
    interpreter all `n` in one program (a power of two, 16 to 4,096), since each program, and each loop iteration
    inside one, costs Python-level time whatever its size (a traced Polestar decode spent 86 of 187 s in 652
    quantize programs of 64 groups)."""
    return gpu_block if device.type == "cuda" else min(4096, max(16, next_pow2(n)))


def next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _compiled():
    global _COMPILED  # imported once on first Triton use, never at import of this module
    if _COMPILED is None:
        from kernels import _nvfp4_triton as k

        _COMPILED = (k._nvfp4_quantize_kernel, k._nvfp4_dequantize_kernel)
    return _COMPILED


def triton_available(device: torch.device) -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


def resolve_impl(impl: str, device: torch.device) -> str:
    """'auto' -> 'triton' on a CUDA device with Triton, else 'torch' (the interpreter is for tests: ask for it
    with impl='triton'); shared by every kernel."""
    if impl not in ("auto", "triton", "torch"):
        raise ValueError(f"impl must be 'auto', 'triton' or 'torch', got {impl!r}")
    if impl == "auto":
        return "triton" if device.type == "cuda" and triton_available(device) else "torch"
    if impl == "triton" and not triton_available(device):
        raise RuntimeError("impl='triton' needs a CUDA device or TRITON_INTERPRET=1 (set before importing triton)")
    return impl


def nvfp4_quantize(x: torch.Tensor, tensor_scale: torch.Tensor | None = None, impl: str = "auto"):
    """x [rows, C] -> (codes [rows, C/2] uint8, scales [rows, C/16] uint8 E4M3 bits, tensor_scale fp32 [])."""
    if x.dim() != 2 or x.shape[1] % GROUP:
        raise ValueError(f"x must be [rows, C] with C a multiple of {GROUP}, got {list(x.shape)}")
    if resolve_impl(impl, x.device) == "torch":
        return nvfp4_quantize_reference(x, tensor_scale)
    s = tensor_scale_of(x) if tensor_scale is None else tensor_scale.float()
    rows, n_groups = x.shape[0], x.numel() // GROUP
    codes = torch.empty(rows, x.shape[1] // 2, dtype=torch.uint8, device=x.device)
    scales = torch.empty(rows, x.shape[1] // GROUP, dtype=torch.uint8, device=x.device)
    if n_groups:
        quantize_kernel, _ = _compiled()
        block = program_block(n_groups, x.device)
        quantize_kernel[(cdiv(n_groups, block),)](x.contiguous(), codes, scales, float(s), n_groups, BLOCK_G=block)
    return codes, scales, s


def nvfp4_dequantize(codes: torch.Tensor, scales: torch.Tensor, tensor_scale: torch.Tensor,
                     impl: str = "auto") -> torch.Tensor:
    """Inverse of `nvfp4_quantize`: fp32 [rows, C]."""
    if resolve_impl(impl, codes.device) == "torch":
        return nvfp4_dequantize_torch(codes, scales, tensor_scale)
    rows, n_groups = codes.shape[0], scales.numel()
    out = torch.empty(rows, codes.shape[1] * 2, dtype=torch.float32, device=codes.device)
    if n_groups:
        _, dequantize_kernel = _compiled()
        block = program_block(n_groups, codes.device)
        dequantize_kernel[(cdiv(n_groups, block),)](codes.contiguous(), scales.contiguous(), out, float(tensor_scale),
                                                    n_groups, BLOCK_G=block)
    return out
