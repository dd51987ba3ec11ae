"""Triton kernel of `kernels.proxy_kl` (imported lazily). Layouts and the reduction order: `kernels/proxy_kl.py`."""

import triton
import triton.language as tl


@triton.jit
def _proxy_kl_kernel(q_ptr, k_ptr, ref_ptr, valid_ptr, probs_ptr, kl_ptr, scale, length, dim, heads, group,
                     floor, BLOCK_H: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr):
    cluster = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64) * BLOCK_H + tl.arange(0, BLOCK_H).to(tl.int64)  # [BLOCK_H]
    d = tl.arange(0, BLOCK_D).to(tl.int64)
    head_ok = head < heads
    q = tl.load(q_ptr + (cluster * heads + head)[:, None] * dim + d[None, :],
                mask=head_ok[:, None] & (d[None, :] < dim), other=0.0).to(tl.float32)  # [BLOCK_H, BLOCK_D]
    k_rows = k_ptr + (head // group)[:, None, None] * length * dim + d[None, None, :]
    row = (cluster * heads + head)[:, None] * length  # [BLOCK_H, 1]
    d_ok = head_ok[:, None, None] & (d[None, None, :] < dim)

    # pass 1: running max and normaliser of each head's scores
    m = tl.full((BLOCK_H,), float("-inf"), tl.float32)
    z = tl.zeros((BLOCK_H,), tl.float32)
    for start in range(0, length, BLOCK_L):
        pos = start + tl.arange(0, BLOCK_L).to(tl.int64)
        live = (pos < length) & (tl.load(valid_ptr + pos, mask=pos < length, other=0) != 0)
        keys = tl.load(k_rows + pos[None, :, None] * dim, mask=d_ok & live[None, :, None], other=0.0).to(tl.float32)
        s = tl.where(live[None, :], tl.sum(keys * q[:, None, :], axis=2) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        z = z * tl.exp(m - m_new) + tl.sum(tl.exp(s - m_new[:, None]), axis=1)
        m = m_new

    # pass 2: probabilities, written out, and KL against the reference in the same sweep
    kl = tl.zeros((BLOCK_H,), tl.float32)
    for start in range(0, length, BLOCK_L):
        pos = start + tl.arange(0, BLOCK_L).to(tl.int64)
        inside = pos < length
        live = inside & (tl.load(valid_ptr + pos, mask=inside, other=0) != 0)
        keys = tl.load(k_rows + pos[None, :, None] * dim, mask=d_ok & live[None, :, None], other=0.0).to(tl.float32)
        s = tl.sum(keys * q[:, None, :], axis=2) * scale
        p = tl.where(live[None, :], tl.exp(s - m[:, None]) / z[:, None], 0.0)
        both = head_ok[:, None] & inside[None, :]
        tl.store(probs_ptr + row + pos[None, :], p, mask=both)
        ref = tl.load(ref_ptr + row + pos[None, :], mask=both, other=1.0)
        pc = tl.maximum(p, floor)
        rc = tl.maximum(ref, floor)
        kl += tl.sum(tl.where(both, pc * (tl.log(pc) - tl.log(rc)), 0.0), axis=1)
    tl.store(kl_ptr + cluster * heads + head, kl, mask=head_ok)
