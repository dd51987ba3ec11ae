"""Hidden-state quantization formats for Polestar's cached layer inputs (docs/algorithm.md §2, paper Table 11).

`get_format(name)` returns an object with `quantize(x) -> Quantized` and `dequantize(q) -> Tensor`, `x` of
shape [..., channels]. Formats:
- "fp16": no quantization (half precision storage);
- "fp8": FP8 E4M3 with one fp32 scale per tensor (amax / 448);
- "int8", "int2": symmetric integers, one scale per 16 consecutive channels (absmax / qmax; int2 keeps
  {−1, 0, 1});
- "mxfp4": E2M1 values with one E8M0 (power-of-two) scale per 32 channels (OCP MX: 2^(⌊log2 amax⌋ − 2));
- "nvfp4": E2M1 values with one FP8-E4M3 scale per 16 channels and one fp32 scale per tensor:
  S = amax(|x|) / (6·448), s_g = e4m3(amax_g / (6·S)), q = RNE_E2M1(x / (s_g·S));
- "nvfp4-residual" (Polestar's default), "mxfp4-residual", "int8-residual"...: any format applied to
  x − anchor, where the caller gives the anchor (the member's cluster centroid at quantization time); the
  anchor is stored with the codes, so dequantization is exact whatever happens to the live centroid later.
E2M1 codes are packed two per byte (low nibble first): bit 3 is the sign, bits 0–2 index the magnitudes
{0, 0.5, 1, 1.5, 2, 3, 4, 6}. Rounding is round-to-nearest, ties to the even code. The 4-bit formats run in
`kernels/` (Triton kernel or its torch reference, chosen by `impl`); the rest are plain torch here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from polestar.errors import ConfigError

E4M3_MAX = 448.0


@dataclass
class Quantized:
    """Codes and scales of one quantized tensor; `shape` is the original shape."""

    shape: tuple[int, ...]
    codes: torch.Tensor
    scales: torch.Tensor | None = None
    tensor_scale: torch.Tensor | None = None
    anchor: torch.Tensor | None = None  # residual formats: anchor table [K, channels] (a snapshot)
    anchor_index: torch.Tensor | None = None  # residual formats: row -> anchor row [n]

    def nbytes(self) -> int:
        parts = (self.codes, self.scales, self.tensor_scale, self.anchor, self.anchor_index)
        return sum(p.numel() * p.element_size() for p in parts if p is not None)


def _groups(x: torch.Tensor, size: int) -> torch.Tensor:
    if x.shape[-1] % size:
        raise ConfigError(f"the channel count {x.shape[-1]} must be a multiple of the group size {size}")
    return x.float().reshape(*x.shape[:-1], x.shape[-1] // size, size)


class NoQuant:
    name = "fp16"

    def quantize(self, x: torch.Tensor, tensor_scale: torch.Tensor | None = None) -> Quantized:
        return Quantized(tuple(x.shape), x.to(torch.float16))

    def dequantize(self, q: Quantized) -> torch.Tensor:
        return q.codes.float()


class FP8:
    name = "fp8"

    def quantize(self, x: torch.Tensor, tensor_scale: torch.Tensor | None = None) -> Quantized:
        scale = tensor_scale if tensor_scale is not None else (
            (x.float().abs().amax() / E4M3_MAX).clamp_min(torch.finfo(torch.float32).tiny))
        return Quantized(tuple(x.shape), (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn),
                         tensor_scale=scale)

    def dequantize(self, q: Quantized) -> torch.Tensor:
        return q.codes.float() * q.tensor_scale


class IntN:
    def __init__(self, bits: int, group: int = 16) -> None:
        self.bits, self.group, self.qmax = bits, group, 2 ** (bits - 1) - 1
        self.name = f"int{bits}"

    def quantize(self, x: torch.Tensor, tensor_scale: torch.Tensor | None = None) -> Quantized:
        g = _groups(x, self.group)
        scale = (g.abs().amax(-1, keepdim=True) / self.qmax).clamp_min(torch.finfo(torch.float32).tiny)
        codes = torch.round(g / scale).clamp(-self.qmax, self.qmax).to(torch.int8)
        return Quantized(tuple(x.shape), codes, scales=scale.squeeze(-1))

    def dequantize(self, q: Quantized) -> torch.Tensor:
        return (q.codes.float() * q.scales.unsqueeze(-1)).reshape(q.shape)


class MXFP4:
    """E2M1 codes (two per byte) with one E8M0 scale per 32 channels: `kernels.mxfp4`."""

    name, group = "mxfp4", 32

    def __init__(self, impl: str = "torch") -> None:
        self.impl = impl

    def quantize(self, x: torch.Tensor, tensor_scale: torch.Tensor | None = None) -> Quantized:
        from kernels.mxfp4 import mxfp4_quantize

        _groups(x, self.group)
        codes, scales = mxfp4_quantize(x.reshape(-1, x.shape[-1]), impl=self.impl)
        return Quantized(tuple(x.shape), codes, scales=scales)

    def dequantize(self, q: Quantized) -> torch.Tensor:
        from kernels.mxfp4 import mxfp4_dequantize

        return mxfp4_dequantize(q.codes, q.scales, impl=self.impl).reshape(q.shape)


class NVFP4:
    """E2M1 codes (two per byte), an E4M3 scale per 16 channels and an fp32 tensor scale: `kernels.nvfp4`."""

    name, group = "nvfp4", 16

    def __init__(self, impl: str = "torch") -> None:
        self.impl = impl

    def quantize(self, x: torch.Tensor, tensor_scale: torch.Tensor | None = None) -> Quantized:
        from kernels.nvfp4 import nvfp4_quantize

        _groups(x, self.group)
        codes, scales, s = nvfp4_quantize(x.reshape(-1, x.shape[-1]), tensor_scale, impl=self.impl)
        return Quantized(tuple(x.shape), codes, scales=scales, tensor_scale=s)

    def dequantize(self, q: Quantized) -> torch.Tensor:
        from kernels.nvfp4 import nvfp4_dequantize

        return nvfp4_dequantize(q.codes, q.scales, q.tensor_scale, impl=self.impl).reshape(q.shape)


class Residual:
    """Quantize x − anchor[index] with `inner`; the anchor table is snapshotted, so dequantization adds back
    exactly what was subtracted even after the caller's live centroids move."""

    def __init__(self, inner) -> None:
        self.inner, self.name = inner, f"{inner.name}-residual"

    def quantize(self, x: torch.Tensor, anchor: torch.Tensor | None = None, index: torch.Tensor | None = None,
                 tensor_scale: torch.Tensor | None = None) -> Quantized:
        """x [n, channels]; anchor [K, channels] with index [n] (row i uses anchor[index[i]]), or [channels]."""
        if anchor is None:
            raise ConfigError(f"{self.name} needs an anchor (the cluster centroids) for its rows")
        table = anchor.float().reshape(-1, x.shape[-1]).clone()
        if index is None:
            index = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
        q = self.inner.quantize(x.float() - table[index], tensor_scale)
        q.anchor, q.anchor_index = table, index.clone()
        return q

    def dequantize(self, q: Quantized) -> torch.Tensor:
        return self.inner.dequantize(q) + q.anchor[q.anchor_index]


_BASE = {"fp16": lambda impl: NoQuant(), "fp8": lambda impl: FP8(), "int8": lambda impl: IntN(8),
         "int2": lambda impl: IntN(2), "mxfp4": MXFP4, "nvfp4": NVFP4}
FORMATS = (*_BASE, *(f"{n}-residual" for n in _BASE if n != "fp16"))


def get_format(name: str, impl: str = "torch"):
    """A quantization format by name (see FORMATS); `impl` picks the Triton kernels or their torch references
    for the 4-bit formats ("auto": Triton on a CUDA device)."""
    if name in _BASE:
        return _BASE[name](impl)
    if name.endswith("-residual") and name.removesuffix("-residual") in _BASE and name != "fp16-residual":
        return Residual(_BASE[name.removesuffix("-residual")](impl))
    raise ConfigError(f"unknown hidden format {name!r}: choose one of {', '.join(FORMATS)}")


@dataclass
class Fetched:
    """Rows of an offloaded store in flight to the device: `codes`/`scales` tiles (device tensors, valid once
    `event` has completed on the consuming stream), the staging buffers kept alive until then."""

    rows: torch.Tensor
    codes: torch.Tensor
    scales: torch.Tensor | None
    event: object | None  # torch.cuda.Event, or None on CPU (the copy was synchronous)
    staging: tuple


class RowStore:
    """Quantized rows [n, channels] that can be read and rewritten by row (Polestar's cached window inputs).

    Rewritten rows reuse the store's tensor scale (so every row shares one, as NVFP4 requires) and, for residual
    formats, a snapshot of the anchors they were quantized against: each rewrite appends its anchor table, so
    older rows keep dequantizing exactly.

    With `offload`, codes and scales live in host memory (pinned when the rows come from a CUDA device) and only
    the anchors stay on the device; `prefetch(rows, stream)` gathers the rows on the host and copies them to the
    device asynchronously on `stream`, and `get(rows, fetched)` waits for that copy and dequantizes the tile on the
    device (docs/algorithm.md §4, paper §4.3). On CPU the same path runs synchronously (host = device), so CI
    tests it.
    """

    def __init__(self, fmt, x: torch.Tensor, anchor: torch.Tensor | None = None,
                 labels: torch.Tensor | None = None, offload: bool = False) -> None:
        self.fmt, self.residual = fmt, isinstance(fmt, Residual)
        self.q = fmt.quantize(x, anchor, labels) if self.residual else fmt.quantize(x)
        self.device, self.offload = x.device, offload
        if offload:
            pin = x.is_cuda
            self.q.codes = _host(self.q.codes, pin)
            self.q.scales = None if self.q.scales is None else _host(self.q.scales, pin)

    def _view(self, rows: torch.Tensor, fetched: Fetched | None = None) -> Quantized:
        q = self.q
        codes = q.codes[rows] if fetched is None else fetched.codes
        scales = (None if q.scales is None else q.scales[rows]) if fetched is None else fetched.scales
        index = None if q.anchor_index is None else q.anchor_index[rows]
        return Quantized((len(rows), *q.shape[1:]), codes, scales, q.tensor_scale, q.anchor, index)

    def prefetch(self, rows: torch.Tensor, stream=None) -> Fetched | None:
        """Start copying `rows` of an offloaded store to the device (None when nothing is offloaded)."""
        if not self.offload:
            return None
        host_rows = rows.cpu()
        pin = self.device.type == "cuda"
        staged = tuple(None if t is None else torch.index_select(t, 0, host_rows, out=_staging(t, len(rows), pin))
                       for t in (self.q.codes, self.q.scales))
        if not pin:
            return Fetched(rows, staged[0], staged[1], None, staged)
        with torch.cuda.stream(stream or _copy_stream(self.device)):
            tiles = [None if t is None else t.to(self.device, non_blocking=True) for t in staged]
            event = torch.cuda.Event()
            event.record()
        return Fetched(rows, tiles[0], tiles[1], event, staged)

    def get(self, rows: torch.Tensor, fetched: Fetched | None = None) -> torch.Tensor:
        """Dequantized rows [len(rows), channels] (fp32). Residual NVFP4 (Polestar's default) reads the rows in
        one fused gather + dequantize + anchor-add pass (`kernels.gather_dequant`). An offloaded store reads the
        `fetched` tile of `prefetch(rows)` (started here when not given)."""
        if self.offload:
            fetched = fetched if fetched is not None else self.prefetch(rows)
            if fetched.event is not None:
                torch.cuda.current_stream(self.device).wait_event(fetched.event)
        q = self.q
        if self.residual and isinstance(self.fmt.inner, NVFP4):
            from kernels.gather_dequant import gather_dequantize

            if fetched is None:
                return gather_dequantize(q.codes, q.scales, q.tensor_scale, q.anchor, q.anchor_index, rows,
                                         impl=self.fmt.inner.impl)
            tile = torch.arange(len(rows), device=self.device)
            return gather_dequantize(fetched.codes, fetched.scales, q.tensor_scale, q.anchor, q.anchor_index[rows],
                                     tile, impl=self.fmt.inner.impl)
        return self.fmt.dequantize(self._view(rows, fetched))

    def set(self, rows: torch.Tensor, x: torch.Tensor, anchor: torch.Tensor | None = None,
            labels: torch.Tensor | None = None, keep: torch.Tensor | None = None) -> None:
        """Rewrite `rows` with `x` [len(rows), channels] (residual formats: against `anchor[labels]`). Where `keep`
        (bool, [len(rows)] or broadcastable) holds, a row keeps what it held: Polestar's padded packet rows that
        carry nothing (`caches.polestar`), written without the host reading which they are."""
        q = self.q
        host_rows = rows.cpu() if self.offload else rows
        if self.residual:
            new = self.fmt.quantize(x, anchor, labels, tensor_scale=q.tensor_scale)
            q.anchor_index[rows] = _kept(keep, q.anchor_index[rows], new.anchor_index + q.anchor.shape[0])
            q.anchor = torch.cat([q.anchor, new.anchor])
        else:
            new = self.fmt.quantize(x, tensor_scale=q.tensor_scale)
        q.codes[host_rows] = _kept(keep, q.codes[host_rows], new.codes.to(q.codes.device))
        if q.scales is not None:
            q.scales[host_rows] = _kept(keep, q.scales[host_rows], new.scales.to(q.scales.device))

    def nbytes(self) -> int:
        """Bytes held, wherever they are (device and host)."""
        return self.q.nbytes()

    def device_nbytes(self) -> int:
        """Bytes held on the device: everything, or only the anchors and indices when offloaded."""
        if not self.offload:
            return self.nbytes()
        parts = (self.q.tensor_scale, self.q.anchor, self.q.anchor_index)
        return sum(p.numel() * p.element_size() for p in parts if p is not None)


def _kept(keep: torch.Tensor | None, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """`new`, with `old`'s rows where `keep` [rows] (or a broadcastable bool) holds."""
    if keep is None:
        return new
    keep = keep.to(new.device)
    return torch.where(keep.reshape(*keep.shape, *[1] * (new.dim() - keep.dim())), old, new)


def _host(t: torch.Tensor, pin: bool) -> torch.Tensor:
    t = t.cpu() if t.is_cuda else t.clone()
    return t.pin_memory() if pin else t


def _staging(t: torch.Tensor, rows: int, pin: bool) -> torch.Tensor:
    return torch.empty((rows, *t.shape[1:]), dtype=t.dtype, pin_memory=pin)


_COPY_STREAMS: dict = {}


def _copy_stream(device: torch.device):
    """One side stream per CUDA device for host-to-device prefetches (created on first use)."""
    key = device.index if device.index is not None else torch.cuda.current_device()
    if key not in _COPY_STREAMS:
        _COPY_STREAMS[key] = torch.cuda.Stream(device=device)
    return _COPY_STREAMS[key]
