"""Fused proxy attention + per-cluster KL and the token-drift KL kernel against fp64 references, under the
Triton interpreter.

Tolerance (derived, not tuned): the kernel's error against an fp64 evaluation of the same inputs must be at most
2× the error of the fp32 torch reference on those inputs, plus 4 fp32 ulps of the largest value compared.
Observed ratios at the time of writing: probabilities 0.6–0.7, drift 0.65–0.8, token drift 1.0."""

from __future__ import annotations

import pytest
import torch

from kernels.proxy_kl import proxy_attention_kl, proxy_attention_kl_reference
from kernels.token_kl import token_drift_kl, token_drift_kl_reference

EPS32 = torch.finfo(torch.float32).eps
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# (clusters K, heads H, kv heads, keys L, head dim D): length-1, empty K, empty L, GQA with odd sizes, MHA, D odd
SHAPES = [(1, 1, 1, 1, 1), (0, 4, 2, 17, 16), (3, 2, 2, 0, 8), (13, 8, 4, 301, 32), (5, 6, 6, 70, 24),
          (4, 3, 1, 129, 17)]


def _assert_close(got, oracle, eager):
    """kernel error ≤ 2 × eager fp32 error + 4 ulps of the largest magnitude compared."""
    if got.numel() == 0:
        return
    err, eager_err = (got.double() - oracle).abs().max(), (eager.double() - oracle).abs().max()
    assert err <= 2 * eager_err + 4 * EPS32 * oracle.abs().max().clamp_min(1e-30), (float(err), float(eager_err))


def _inputs(shape, dtype, seed=0):
    k_n, h, h_kv, length, dim = shape
    g = torch.Generator().manual_seed(seed + sum(shape))
    q = (2 * torch.randn(k_n, h, dim, generator=g)).to(dtype)
    k = torch.randn(h_kv, length, dim, generator=g).to(dtype)
    ref = torch.randn(k_n, h, length, generator=g).mul(3).softmax(-1)
    if length > 2:
        ref[..., 1] = 0.0  # exact zeros exercise the probability floor
        ref = ref / ref.sum(-1, keepdim=True)
    return q, k, ref, dim ** -0.5


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("padded", [False, True], ids=["dense", "padded"])
def test_proxy_attention_kl_matches_fp64(shape, dtype, padded):
    q, k, ref, scale = _inputs(shape, dtype)
    length = shape[3]
    pad = None
    if padded:
        pad = torch.zeros(length, dtype=torch.bool)
        pad[length // 2 + 1:] = True  # keep at least one key
    probs, drift = proxy_attention_kl(q, k, ref, scale, pad, impl="triton")
    assert probs.shape == (shape[0], shape[1], length) and drift.shape == (shape[0],)
    assert probs.dtype == drift.dtype == torch.float32
    oracle_p, oracle_d = proxy_attention_kl_reference(q.double(), k.double(), ref.double(), scale, pad)
    eager_p, eager_d = proxy_attention_kl_reference(q, k, ref, scale, pad)
    _assert_close(probs, oracle_p, eager_p)
    _assert_close(drift, oracle_d, eager_d)
    if pad is not None and length:
        assert torch.all(probs[..., pad] == 0)


def test_proxy_attention_kl_torch_impl_is_the_reference():
    q, k, ref, scale = _inputs((6, 4, 2, 40, 16), torch.float32)
    p, d = proxy_attention_kl(q, k, ref, scale, impl="torch")
    rp, rd = proxy_attention_kl_reference(q, k, ref, scale)
    assert torch.equal(p, rp) and torch.equal(d, rd)


def test_proxy_attention_kl_zero_drift_against_itself():
    q, k, ref, scale = _inputs((5, 4, 4, 33, 16), torch.float32)
    probs, _ = proxy_attention_kl(q, k, ref, scale, impl="triton")
    _, drift = proxy_attention_kl(q, k, probs, scale, impl="triton")
    assert drift.abs().max() <= 64 * EPS32  # KL of a distribution with itself: rounding of log only


def test_proxy_attention_kl_rejects_bad_shapes():
    q, k, ref, scale = _inputs((2, 4, 2, 9, 8), torch.float32)
    with pytest.raises(ValueError, match="do not fit"):
        proxy_attention_kl(q[:, :3], k, ref[:, :3], scale, impl="triton")
    with pytest.raises(ValueError, match="ref must be"):
        proxy_attention_kl(q, k, ref[..., :5], scale, impl="triton")


@pytest.mark.parametrize("rows,heads,length", [(1, 1, 1), (0, 4, 9), (7, 8, 301), (3, 6, 70)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_token_drift_kl_matches_fp64(rows, heads, length, dtype):
    g = torch.Generator().manual_seed(rows * 31 + length)
    now = torch.randn(1, heads, rows, length, generator=g).mul(2).softmax(-1).to(dtype)
    ref = torch.randn(1, heads, rows, length, generator=g).mul(2).softmax(-1).to(dtype)
    now, ref = now[0].transpose(0, 1), ref[0].transpose(0, 1)  # the decode loop's strided view, no copy
    got = token_drift_kl(now, ref, impl="triton")
    assert got.shape == (rows,) and got.dtype == torch.float32
    _assert_close(got, token_drift_kl_reference(now.double(), ref.double()), token_drift_kl_reference(now, ref))


def test_token_drift_kl_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="both be"):
        token_drift_kl(torch.ones(2, 3, 4), torch.ones(2, 3, 5), impl="triton")
