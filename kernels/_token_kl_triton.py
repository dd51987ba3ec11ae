"""Triton kernel of `kernels.token_kl` (imported lazily). Layouts: `kernels/token_kl.py`."""

import triton
import triton.language as tl


@triton.jit
def _token_kl_kernel(now_ptr, ref_ptr, kl_ptr, now_s0, now_s1, ref_s0, ref_s1, length, heads, floor,
                     BLOCK_H: tl.constexpr, BLOCK_L: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    head = tl.arange(0, BLOCK_H).to(tl.int64)
    head_ok = head < heads
    now_base = now_ptr + row * now_s0 + head[:, None] * now_s1
    ref_base = ref_ptr + row * ref_s0 + head[:, None] * ref_s1
    kl = tl.zeros((BLOCK_H,), tl.float32)
    for start in range(0, length, BLOCK_L):
        pos = start + tl.arange(0, BLOCK_L).to(tl.int64)
        both = head_ok[:, None] & (pos < length)[None, :]
        p = tl.maximum(tl.load(now_base + pos[None, :], mask=both, other=1.0).to(tl.float32), floor)
        q = tl.maximum(tl.load(ref_base + pos[None, :], mask=both, other=1.0).to(tl.float32), floor)
        kl += tl.sum(tl.where(both, p * (tl.log(p) - tl.log(q)), 0.0), axis=1)
    tl.store(kl_ptr + row * heads + head, kl, mask=head_ok)
