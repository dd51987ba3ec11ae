"""Quantization formats: E2M1 rounding, NVFP4/MXFP4 against a plain per-element reference, error bounds,
residual quantization on clustered data, anchors that survive centroid shifts."""

from __future__ import annotations

import math

import pytest
import torch

from polestar.errors import ConfigError
from kernels.nvfp4 import e2m1_decode_reference as e2m1_decode
from kernels.nvfp4 import e2m1_encode_reference as e2m1_encode
from polestar.quant import FORMATS, RowStore, get_format

E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _rne_e2m1(v: float) -> float:
    """Plain reference: nearest grid magnitude, ties to the even index, sign kept, clamp at 6."""
    mag = min(abs(v), 6.0)
    best = min(range(8), key=lambda i: (abs(E2M1_GRID[i] - mag), i % 2))
    return math.copysign(E2M1_GRID[best], v) if E2M1_GRID[best] else 0.0


def _e4m3(v: float) -> float:
    return float(torch.tensor(v).to(torch.float8_e4m3fn).float())


def test_e2m1_round_trip_matches_reference_including_ties():
    values = torch.tensor([0.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 9.0, -0.3, -1.75, -5.0, 0.26, 2.9])
    decoded = e2m1_decode(e2m1_encode(values))
    assert decoded.tolist() == [_rne_e2m1(v) for v in values.tolist()]


def test_nvfp4_matches_plain_reference():
    x = torch.randn(5, 48, generator=torch.Generator().manual_seed(0)) * 3
    fmt = get_format("nvfp4")
    got = fmt.dequantize(fmt.quantize(x))
    s = float(x.abs().max()) / (6 * 448)
    expected = torch.empty_like(x)
    for r in range(5):
        for g in range(3):
            block = x[r, 16 * g: 16 * g + 16].tolist()
            sg = _e4m3(max(abs(v) for v in block) / (6 * s))
            expected[r, 16 * g: 16 * g + 16] = torch.tensor([_rne_e2m1(v / (sg * s)) * sg * s for v in block])
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=0)


def test_mxfp4_matches_plain_reference():
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(1)) * 0.02
    fmt = get_format("mxfp4")
    got = fmt.dequantize(fmt.quantize(x))
    expected = torch.empty_like(x)
    for r in range(3):
        for g in range(2):
            block = x[r, 32 * g: 32 * g + 32].tolist()
            scale = 2.0 ** (math.floor(math.log2(max(abs(v) for v in block))) - 2)
            expected[r, 32 * g: 32 * g + 32] = torch.tensor([_rne_e2m1(v / scale) * scale for v in block])
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=0)


# Relative L2 error bounds on N(0, 1) data, from each format's step size: fp16 2^-11; fp8 E4M3 with 3 mantissa
# bits ≤ 2^-4 relative; int8 per-16 absmax: step amax/127 with amax ≈ 2σ → ~1%; 4-bit E2M1 with block scales
# ~10–15%; int2 (3 levels) keeps only the sign of large values.
BOUNDS = {"fp16": 1e-3, "fp8": 0.04, "int8": 0.01, "mxfp4": 0.15, "nvfp4": 0.12, "int2": 0.75}


@pytest.mark.parametrize("name", list(BOUNDS))
def test_round_trip_error_bounds(name):
    x = torch.randn(256, 64, generator=torch.Generator().manual_seed(2))
    fmt = get_format(name)
    err = (fmt.dequantize(fmt.quantize(x)) - x).norm() / x.norm()
    assert err <= BOUNDS[name], float(err)


def test_residual_nvfp4_beats_plain_nvfp4_on_clustered_data():
    g = torch.Generator().manual_seed(3)
    centroids = torch.randn(4, 64, generator=g) * 5
    labels = torch.randint(0, 4, (200,), generator=g)
    x = centroids[labels] + 0.1 * torch.randn(200, 64, generator=g)
    plain, residual = get_format("nvfp4"), get_format("nvfp4-residual")
    e_plain = (plain.dequantize(plain.quantize(x)) - x).norm()
    e_resid = (residual.dequantize(residual.quantize(x, centroids, labels)) - x).norm()
    assert e_resid < 0.1 * e_plain


def test_dequantization_unchanged_after_centroid_shift():
    g = torch.Generator().manual_seed(4)
    centroids = torch.randn(3, 32, generator=g)
    labels = torch.randint(0, 3, (20,), generator=g)
    x = centroids[labels] + 0.05 * torch.randn(20, 32, generator=g)
    fmt = get_format("nvfp4-residual")
    q = fmt.quantize(x, centroids, labels)
    before = fmt.dequantize(q)
    centroids += 1.0  # the live centroids move (a packet shifted them)
    assert torch.equal(fmt.dequantize(q), before)


def test_every_format_by_name_and_unknown_refused():
    for name in FORMATS:
        assert get_format(name).name == name
    with pytest.raises(ConfigError, match="unknown hidden format 'fp3'"):
        get_format("fp3")
    with pytest.raises(ConfigError, match="multiple of the group size 16"):
        get_format("nvfp4").quantize(torch.randn(2, 20))


@pytest.mark.parametrize("name", ["nvfp4-residual", "mxfp4", "int8", "fp8-residual"])
def test_row_store_rewrites_rows_and_keeps_the_others(name):
    g = torch.Generator().manual_seed(5)
    centroids = torch.randn(2, 64, generator=g)
    labels = torch.randint(0, 2, (10,), generator=g)
    x = centroids[labels] + 0.1 * torch.randn(10, 64, generator=g)
    store = RowStore(get_format(name), x, centroids, labels)
    before = store.get(torch.arange(10))
    rows = torch.tensor([2, 7])
    new = x[rows] + 0.05
    store.set(rows, new, centroids + 0.5, labels[rows])  # the live centroids moved
    after = store.get(torch.arange(10))
    keep = torch.ones(10, dtype=torch.bool)
    keep[rows] = False
    assert torch.equal(after[keep], before[keep])
    assert (after[rows] - new).norm() < 0.2 * new.norm()


@pytest.mark.parametrize("name", ["nvfp4-residual", "mxfp4-residual", "fp8", "fp16"])
def test_offloaded_store_reads_and_writes_like_a_resident_one(name):
    """The host-memory path (gather on the host, copy, dequantize the tile; on CPU without pinning or streams)
    returns the same bits as the resident store, before and after rewrites, with or without a prefetch."""
    g = torch.Generator().manual_seed(5)
    centroids = torch.randn(3, 64, generator=g)
    labels = torch.randint(0, 3, (12,), generator=g)
    x = centroids[labels] + 0.1 * torch.randn(12, 64, generator=g)
    residual = name.endswith("-residual")
    args = (centroids, labels) if residual else ()
    resident = RowStore(get_format(name), x, *args)
    offloaded = RowStore(get_format(name), x, *args, offload=True)
    assert offloaded.q.codes.data_ptr() != resident.q.codes.data_ptr()
    rows = torch.tensor([9, 0, 4])
    assert torch.equal(offloaded.get(rows), resident.get(rows))
    assert torch.equal(offloaded.get(rows, offloaded.prefetch(rows)), resident.get(rows))
    new = x[rows] - 0.07
    write = (centroids + 0.3, labels[rows]) if residual else ()
    for store in (resident, offloaded):
        store.set(rows, new, *write)
    everything = torch.arange(12)
    assert torch.equal(offloaded.get(everything), resident.get(everything))
    assert offloaded.device_nbytes() < offloaded.nbytes() == resident.nbytes() == resident.device_nbytes()
    assert resident.prefetch(rows) is None
